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
//!   for a function that returns an `R`, it also makes a
//!   `converse_ext::futures::TypedFuture<R>` on the calling PE, packs it
//!   before the arguments, and returns it: the invoker fills it with
//!   what the function returned;
//! - a *direct invoker*: a second handler that reads the arguments alone
//!   (no envelope), so that `CPM_PRINT_INTEGER` (an
//!   `Invokable<i32>`: the arguments as one value, a tuple for several)
//!   is also a typed handler, and a typed reduction may end in it;
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
//! Generic (lifetimes alone are fine), `async`, `unsafe`, `extern`,
//! variadic or method (`self`) functions; `impl Trait`, `&mut` and
//! `&'static` arguments, argument patterns other than a name, attributes on
//! arguments, more than 16 arguments (serde's tuples; group them in a
//! struct); an `impl Trait` return type. A return type that cannot travel
//! back (not serde's `Serialize + DeserializeOwned`) is refused by the
//! check it writes, with the extensions' message.
//!
//! `#[invokable]` goes on a free function (in a module or a function
//! body), not in an `impl` block: it writes items beside the function.
//! Two invokables whose names differ only in case (`fn f`, `fn F`) in one
//! module collide in `CPM_F`.
//!
//! # Hygiene
//!
//! The invoker's locals and the launcher's destination parameter have
//! `__cpm_` names, and the code it writes names everything by absolute
//! path, so an argument may be named like the function, `msg` or
//! `destination`, and a function `drop`.
use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as TokenStream2};
use quote::{format_ident, quote, quote_spanned};
use syn::ext::IdentExt;
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
    check_signature(sig)?;
    let args = arguments(sig)?;
    let vis = &function.vis;
    let name = &sig.ident;
    let plain = name.unraw().to_string();
    let launcher = format_ident!("Cpm_{}", plain);
    let descriptor = format_ident!("CPM_{}", plain.to_uppercase());
    let invoker = format_ident!("__cpm_invoker_{}", plain);
    let registrar = format_ident!("__cpm_register_{}", plain);
    let generics = &sig.generics;
    let names: Vec<&Ident> = args.iter().map(|a| &a.name).collect();
    let direct = format_ident!("__cpm_direct_{}", plain);
    // What the function takes as one value (its typed handler's `A`).
    let value_ty: TokenStream2 = match args.as_slice() {
        [] => quote!(()),
        [one] => {
            let w = &one.wire;
            quote!(#w)
        }
        many => {
            let ws = many.iter().map(|a| &a.wire);
            quote!((#(#ws),*))
        }
    };
    let returns: Option<&Type> = match &sig.output {
        ReturnType::Default => None,
        ReturnType::Type(_, ty) => Some(ty),
    };
    let types: Vec<&Type> = args.iter().map(|a| &a.ty).collect();
    let wires: Vec<&Type> = args.iter().map(|a| &a.wire).collect();
    // The invoker's locals have names no argument or function can take,
    // so that an argument named like the function, `msg`, or `drop` still
    // means what the user wrote.
    let unpacked: Vec<Ident> = (0..args.len())
        .map(|i| format_ident!("__cpm_arg{}", i))
        .collect();
    let passed: Vec<TokenStream2> = args
        .iter()
        .zip(&unpacked)
        .map(|(a, n)| if a.borrowed { quote!(&#n) } else { quote!(#n) })
        .collect();
    // One check per argument, spanned on its type, so that a type that
    // cannot travel is reported there, in the module's words.
    let checks = args.iter().map(|a| {
        let wire = &a.wire;
        quote_spanned! {a.ty.span()=>
            ::converse_ext::cpm::__private::assert_invokable_arg::<#wire>();
        }
    });
    let return_check = returns.map(|r| {
        quote_spanned! {r.span()=>
            ::converse_ext::cpm::__private::assert_invokable_return::<#r>();
        }
    });
    let constructor = if explicit {
        quote!()
    } else {
        constructor(&plain, &descriptor)
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
    // The invoker: the arguments behind the envelope; a function that
    // returns answers through the typed future packed before them.
    let (invoker_body, launcher_out, launcher_body) = match returns {
        None => (
            quote! {
                let (#(#unpacked,)*): (#(#wires,)*) =
                    ::converse_ext::cpm::__private::unpack(&__cpm_msg, &#descriptor);
                ::core::mem::drop(__cpm_msg);
                #name(#(#passed),*)
            },
            quote!(),
            quote! {
                ::converse_ext::cpm::__private::launch(
                    &#descriptor,
                    &__cpm_destination,
                    &(#(&#names,)*),
                )
            },
        ),
        Some(r) => (
            quote! {
                #return_check
                let (__cpm_answer, #(#unpacked,)*): (
                    ::converse_ext::cpm::__private::TypedFuture<#r>,
                    #(#wires,)*
                ) = ::converse_ext::cpm::__private::unpack(&__cpm_msg, &#descriptor);
                ::core::mem::drop(__cpm_msg);
                __cpm_answer.set(&#name(#(#passed),*))
            },
            quote!(-> ::converse_ext::cpm::__private::TypedFuture<#r>),
            quote! {
                let __cpm_answer = ::converse_ext::cpm::__private::TypedFuture::<#r>::new();
                ::converse_ext::cpm::__private::launch(
                    &#descriptor,
                    &__cpm_destination,
                    &(&__cpm_answer, #(&#names,)*),
                );
                __cpm_answer
            },
        ),
    };
    let needs_futures = returns.map(|_| quote!(::converse_ext::cpm::__private::needs_futures();));
    let launcher_doc = if returns.is_some() {
        format!(
            "{launcher_doc} Returns the future its answer fills (`wait()` on a \
             thread, or `.await` in a task, of this PE)."
        )
    } else {
        launcher_doc
    };
    Ok(quote! {
        #function

        #[doc = #descriptor_doc]
        #vis static #descriptor: ::converse_ext::cpm::Invokable<#value_ty> =
            ::converse_ext::cpm::Invokable::new(
                ::core::concat!(::core::module_path!(), "::", #plain),
                // Where it is declared: two functions of the same path (in
                // function bodies, or a package's library and binary)
                // still sort in one order.
                ::core::concat!(
                    ::core::file!(), ":", ::core::line!(), ":", ::core::column!()
                ),
                #registrar,
            );

        // Registers the invoker and the direct invoker as their own
        // function types, so that the core's check of handler tables
        // between PEs tells invokers apart.
        #[doc(hidden)]
        fn #registrar() -> ::converse_ext::cpm::Registered {
            #needs_futures
            ::converse_ext::cpm::Registered::new(
                ::converse_ext::cpm::__private::register_handler(#invoker),
                ::converse_ext::cpm::__private::register_handler(#direct),
            )
        }

        #[doc(hidden)]
        fn #invoker(__cpm_msg: ::converse_ext::cpm::__private::Message) {
            #(#checks)*
            #invoker_body
        }

        // The arguments alone, as a typed handler's message carries them.
        #[doc(hidden)]
        fn #direct(__cpm_msg: ::converse_ext::cpm::__private::Message) {
            let (#(#unpacked,)*): (#(#wires,)*) =
                ::converse_ext::cpm::__private::unpack_direct(&__cpm_msg, &#descriptor);
            ::core::mem::drop(__cpm_msg);
            let _ = #name(#(#passed),*);
        }

        #[doc = #launcher_doc]
        #[allow(non_snake_case, clippy::too_many_arguments)]
        #vis fn #launcher #generics(
            __cpm_destination: impl ::converse_ext::cpm::Destination,
            #(#names: #types),*
        ) #launcher_out {
            #launcher_body
        }

        #constructor
    })
}

/// The error of an `#[invokable]` that cannot `why`, spanned at `span`.
fn refuse<T>(span: Span, why: &str) -> syn::Result<T> {
    Err(syn::Error::new(
        span,
        format!("an #[invokable] function cannot {why}"),
    ))
}

/// Refuses a signature no invoker can call the same way on every PE: a
/// generic, async, unsafe, extern or variadic function, or one that
/// returns a value or takes more than 16 arguments.
fn check_signature(sig: &syn::Signature) -> syn::Result<()> {
    let lifetimes_only = sig
        .generics
        .params
        .iter()
        .all(|p| matches!(p, syn::GenericParam::Lifetime(_)));
    if !lifetimes_only || sig.generics.where_clause.is_some() {
        return refuse(
            sig.generics.span(),
            "be generic: its invoker is one handler, the same on every PE",
        );
    }
    if sig.inputs.len() > 16 {
        return refuse(
            sig.inputs.span(),
            "take more than 16 arguments (serde packs tuples of up to 16): group some in a struct",
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
    if let ReturnType::Type(_, ty) = &sig.output
        && contains_impl_trait(ty)
    {
        return refuse(
            ty.span(),
            "return an `impl Trait`: its value travels back to the caller as a known type",
        );
    }
    Ok(())
}

/// The arguments, each a plain name and a type that can travel, or an
/// error spanned on the one that cannot.
fn arguments(sig: &syn::Signature) -> syn::Result<Vec<Arg>> {
    let mut args = Vec::new();
    for input in &sig.inputs {
        let pat = match input {
            FnArg::Receiver(r) => {
                return refuse(r.span(), "be a method: there is no `self` on the other PE");
            }
            FnArg::Typed(pat) => pat,
        };
        if let Some(attr) = pat.attrs.first() {
            return refuse(
                attr.span(),
                "have attributes on an argument: the launcher and the invoker must agree on \
                 every argument",
            );
        }
        if contains_impl_trait(&pat.ty) {
            return refuse(
                pat.ty.span(),
                "take an `impl Trait` argument: it is generic, and its invoker is one handler",
            );
        }
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
            name: ident.ident.clone(),
            ty,
            wire,
            borrowed,
        });
    }
    Ok(args)
}

/// The static the platform's loader runs before `main` to add the
/// invokable to the module's list (`#[invokable]` without `explicit`).
fn constructor(plain: &str, descriptor: &Ident) -> TokenStream2 {
    let ctor_static = format_ident!("__CPM_CONSTRUCTOR_{}", plain.to_uppercase());
    quote! {
        #[cfg(not(any(
            target_os = "linux", target_os = "android", target_os = "freebsd",
            target_os = "netbsd", target_os = "openbsd", target_os = "dragonfly",
            target_os = "illumos", target_os = "solaris", target_vendor = "apple"
        )))]
        ::core::compile_error!(
            "#[invokable] registers itself with a constructor, which this target lacks: \
             write #[invokable(explicit)] and call converse_ext::cpm::register on every PE"
        );

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
}

/// The type an argument travels as, and whether the function borrows it.
fn wire_type(ty: &Type) -> syn::Result<(Type, bool)> {
    let Type::Reference(r) = ty else {
        return Ok((ty.clone(), false));
    };
    if r.lifetime.as_ref().is_some_and(|l| l.ident == "static") {
        return Err(syn::Error::new(
            r.span(),
            "an #[invokable] function cannot take a `&'static` argument: the unpacked value \
             lives while the function runs (take `&T` or an owned value)",
        ));
    }
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

/// Whether `ty` holds an `impl Trait` anywhere.
fn contains_impl_trait(ty: &Type) -> bool {
    match ty {
        Type::ImplTrait(_) => true,
        Type::Reference(r) => contains_impl_trait(&r.elem),
        Type::Slice(s) => contains_impl_trait(&s.elem),
        Type::Array(a) => contains_impl_trait(&a.elem),
        Type::Paren(p) => contains_impl_trait(&p.elem),
        Type::Group(g) => contains_impl_trait(&g.elem),
        Type::Tuple(t) => t.elems.iter().any(contains_impl_trait),
        Type::Path(p) => p.path.segments.iter().any(|seg| match &seg.arguments {
            syn::PathArguments::AngleBracketed(a) => a
                .args
                .iter()
                .any(|arg| matches!(arg, syn::GenericArgument::Type(t) if contains_impl_trait(t))),
            _ => false,
        }),
        _ => false,
    }
}
