//! # converse-macros
//!
//! `#[invokable]`: the Rust form of the extensions manual's `CpmInvokable`
//! (chapter 6, automatic parameter marshalling). Use it through
//! `converse_ext::cpm::invokable` (or `converse_ext::invokable`); the code
//! it writes names `::converse_ext`, so the calling crate depends on
//! `converse-ext` under that name.
//!
//! # What it writes
//!
//! For `#[invokable] fn print_integer(n: i32) { … }` in module `m`:
//!
//! - the function, unchanged;
//! - `CPM_PRINT_INTEGER`, a `converse_ext::cpm::Invokable`: the function's
//!   name (`m::print_integer`, its full path) and its *invoker*, the
//!   handler that unpacks the arguments from a message and calls the
//!   function;
//! - the *launcher* `Cpm_print_integer(destination, n)`: the manual's
//!   name, the function's arguments after a destination
//!   (`impl converse_ext::cpm::Destination`); it packs the arguments
//!   (postcard) and hands the message to the destination's send function;
//! - unless `#[invokable(explicit)]`: a constructor (an `.init_array`
//!   entry, run before `main`) that adds the invokable to the module's
//!   list, which `converse_ext::cpm` registers on every PE, sorted by full
//!   path, in a core module-init hook. The manual's
//!   `CpmInitializeThisModule` is thus implicit; with `explicit` the
//!   program calls `converse_ext::cpm::register(&CPM_PRINT_INTEGER)` on
//!   every PE, in the same order, instead.
//!
//! # Arguments
//!
//! Each argument's type must be `Serialize + DeserializeOwned` (checked at
//! compile time, with a message naming the type). A `&str` argument
//! travels as a `String`, a `&[T]` as a `Vec<T>`, any other `&T` as a `T`:
//! the invoker owns the unpacked values and lends them to the function.
//! The manual's "pointer" types (`CpmDeclarePointer`) are owned values
//! here (`Box<T>`, `Vec<T>`, `String`).
//!
//! # Refused, with a compile error saying why
//!
//! Generic, `async`, `unsafe`, `extern`, variadic or method (`self`)
//! functions; argument patterns other than a name; `&mut` arguments; a
//! return type (the caller is on another PE: answer with another
//! invokable, or a future).
use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as TokenStream2};
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{FnArg, Ident, ItemFn, Pat, ReturnType, Type, parse_macro_input};

/// Makes an ordinary function invokable on other PEs (`CpmInvokable`):
/// see the crate documentation for what it writes.
#[doc(alias = "CpmInvokable")]
#[proc_macro_attribute]
pub fn invokable(attr: TokenStream, item: TokenStream) -> TokenStream {
    let explicit = match parse_options(attr.into()) {
        Ok(explicit) => explicit,
        Err(e) => return e.to_compile_error().into(),
    };
    let function = parse_macro_input!(item as ItemFn);
    match expand(&function, explicit) {
        Ok(tokens) => tokens.into(),
        Err(e) => {
            // The function stays, so that its other uses still compile and
            // only this error is reported.
            let mut out = e.to_compile_error();
            out.extend(quote!(#function));
            out.into()
        }
    }
}

/// The attribute's options: nothing, or `explicit`.
fn parse_options(attr: TokenStream2) -> syn::Result<bool> {
    if attr.is_empty() {
        return Ok(false);
    }
    let word: Ident = syn::parse2(attr.clone()).map_err(|_| {
        syn::Error::new(
            attr.span(),
            "#[invokable] takes no option but `explicit` (register it yourself with \
             converse_ext::cpm::register)",
        )
    })?;
    if word != "explicit" {
        return Err(syn::Error::new(
            word.span(),
            format!(
                "unknown #[invokable] option `{word}`: the one option is `explicit` \
                 (register it yourself with converse_ext::cpm::register)"
            ),
        ));
    }
    Ok(true)
}

/// One argument of the function.
struct Arg {
    name: Ident,
    /// The type in the function's (and the launcher's) signature.
    ty: Type,
    /// The type that travels and that the invoker owns.
    wire: Type,
    /// The function takes a reference to the owned value.
    borrowed: bool,
}

fn expand(function: &ItemFn, explicit: bool) -> syn::Result<TokenStream2> {
    let sig = &function.sig;
    let refuse = |span: Span, why: &str| {
        Err(syn::Error::new(
            span,
            format!("an #[invokable] function cannot {why}"),
        ))
    };
    if !sig.generics.params.is_empty() || sig.generics.where_clause.is_some() {
        return refuse(
            sig.generics.span(),
            "be generic: its invoker is one handler, the same on every PE",
        );
    }
    if let Some(t) = &sig.asyncness {
        return refuse(
            t.span(),
            "be async: it runs in a handler (use converse_ext::tasks::spawn inside it)",
        );
    }
    if let Some(t) = &sig.unsafety {
        return refuse(
            t.span(),
            "be unsafe: a message from another PE calls it, with no one to uphold its contract",
        );
    }
    if let Some(abi) = &sig.abi {
        return refuse(abi.span(), "be extern: it is called from Rust");
    }
    if let Some(v) = &sig.variadic {
        return refuse(v.span(), "be variadic");
    }
    if let ReturnType::Type(_, ty) = &sig.output {
        return refuse(
            ty.span(),
            "return a value: its caller is on another PE (answer with another \
             invokable, or fill a converse_ext::futures::Cfuture)",
        );
    }
    let mut args = Vec::new();
    for input in &sig.inputs {
        let pat = match input {
            FnArg::Receiver(r) => {
                return refuse(r.span(), "be a method: there is no `self` on the other PE");
            }
            FnArg::Typed(pat) => pat,
        };
        let Pat::Ident(ident) = &*pat.pat else {
            return refuse(
                pat.pat.span(),
                "take a pattern argument: name each argument (`x: T`)",
            );
        };
        if ident.by_ref.is_some() || ident.subpat.is_some() {
            return refuse(ident.span(), "take a pattern argument: name each argument");
        }
        let ty = (*pat.ty).clone();
        let (wire, borrowed) = wire_type(&ty)?;
        args.push(Arg {
            name: format_ident!("{}", ident.ident),
            ty,
            wire,
            borrowed,
        });
    }

    let vis = &function.vis;
    let name = &sig.ident;
    let launcher = format_ident!("Cpm_{}", name);
    let descriptor = format_ident!("CPM_{}", name.to_string().to_uppercase());
    let invoker = format_ident!("__cpm_invoker_{}", name);
    let name_str = name.to_string();
    let names: Vec<&Ident> = args.iter().map(|a| &a.name).collect();
    let types: Vec<&Type> = args.iter().map(|a| &a.ty).collect();
    let wires: Vec<&Type> = args.iter().map(|a| &a.wire).collect();
    let passed: Vec<TokenStream2> = args
        .iter()
        .map(|a| {
            let n = &a.name;
            if a.borrowed { quote!(&#n) } else { quote!(#n) }
        })
        .collect();
    // One check per argument, spanned on its type, so that a type that
    // cannot travel is reported there, in the module's words.
    let checks = args.iter().map(|a| {
        let wire = &a.wire;
        quote_spanned! {a.ty.span()=>
            ::converse_ext::cpm::__private::assert_invokable_arg::<#wire>();
        }
    });
    let constructor = if explicit {
        quote!()
    } else {
        let ctor_static = format_ident!("__CPM_CONSTRUCTOR_{}", name.to_string().to_uppercase());
        quote! {
            // Run before `main` by the platform's loader: it adds the
            // invokable to the module's list (nothing else).
            #[used]
            #[cfg_attr(
                any(target_os = "linux", target_os = "android", target_os = "freebsd",
                    target_os = "netbsd", target_os = "openbsd", target_os = "dragonfly",
                    target_os = "illumos", target_os = "solaris"),
                unsafe(link_section = ".init_array")
            )]
            #[cfg_attr(target_vendor = "apple", unsafe(link_section = "__DATA,__mod_init_func"))]
            #[doc(hidden)]
            #[allow(non_upper_case_globals)]
            static #ctor_static: extern "C" fn() = {
                extern "C" fn constructor() {
                    ::converse_ext::cpm::__private::add_automatic(&#descriptor);
                }
                constructor
            };
        }
    };
    let launcher_doc = format!(
        "Invokes [`{name}`] where `destination` says (the manual's launcher \
         `Cpm_{name}`): packs the arguments and hands the message to the \
         destination's send function."
    );
    let descriptor_doc = format!(
        "The invokable [`{name}`]: its name and invoker, for \
         `converse_ext::cpm::register`."
    );
    Ok(quote! {
        #function

        #[doc = #descriptor_doc]
        #vis static #descriptor: ::converse_ext::cpm::Invokable =
            ::converse_ext::cpm::Invokable::new(
                ::core::concat!(::core::module_path!(), "::", #name_str),
                #invoker,
            );

        #[doc(hidden)]
        fn #invoker(msg: ::converse_ext::cpm::__private::Message) {
            #(#checks)*
            let (#(#names,)*): (#(#wires,)*) =
                ::converse_ext::cpm::__private::unpack(&msg, &#descriptor);
            drop(msg);
            #name(#(#passed),*)
        }

        #[doc = #launcher_doc]
        #[allow(non_snake_case, clippy::too_many_arguments)]
        #vis fn #launcher(
            destination: impl ::converse_ext::cpm::Destination,
            #(#names: #types),*
        ) {
            ::converse_ext::cpm::__private::launch(
                &#descriptor,
                &destination,
                &(#(&#names,)*),
            )
        }

        #constructor
    })
}

/// The type an argument travels as, and whether the function borrows it.
fn wire_type(ty: &Type) -> syn::Result<(Type, bool)> {
    let Type::Reference(r) = ty else {
        return Ok((ty.clone(), false));
    };
    if r.mutability.is_some() {
        return Err(syn::Error::new(
            r.span(),
            "an #[invokable] function cannot take a `&mut` argument: the caller's \
             value stays on the caller's PE (take it by value)",
        ));
    }
    let owned: Type = match &*r.elem {
        Type::Path(p) if p.qself.is_none() && p.path.is_ident("str") => {
            syn::parse_quote!(::std::string::String)
        }
        Type::Slice(s) => {
            let elem = &s.elem;
            syn::parse_quote!(::std::vec::Vec<#elem>)
        }
        other => other.clone(),
    };
    Ok((owned, true))
}
