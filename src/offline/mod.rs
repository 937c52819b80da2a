//! The commands that need no cluster: `check` of recorded reviews
//! ([`cases`]), policy test suites ([`suite`]), `policy suggest` ([`suggest`]),
//! the ValidatingAdmissionPolicy export ([`vap`]), the static manifests of
//! tamper-proof mode ([`static_export`]), the offline `doctor` ([`doctor`]) and
//! the presets catalog listing ([`presets`]).

pub mod cases;
pub mod doctor;
pub mod presets;
pub mod static_export;
pub mod suggest;
pub mod suite;
pub mod vap;
