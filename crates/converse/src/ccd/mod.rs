//! Conditions and periodic checks (Ccd). So far: quiescence detection, the
//! detector behind the manual's `CcdQUIESCENCE` condition.
pub mod quiescence;
