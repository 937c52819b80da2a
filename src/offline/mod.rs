//! The commands that need no cluster: `check` of recorded reviews ([`check`],
//! case files in [`cases`]), policy test suites ([`suite`]), `policy validate`
//! ([`validate`]), `policy export` ([`export`]: the ValidatingAdmissionPolicy
//! of [`vap`], the static manifests of tamper-proof mode of
//! [`static_export`]), `policy suggest` ([`suggest`]), the offline `doctor`
//! ([`doctor`]), the presets catalog listing ([`presets`]) and `certs`
//! ([`certs`]).

pub mod cases;
pub mod certs;
pub mod check;
pub mod difference;
pub mod doctor;
pub mod export;
pub mod presets;
pub mod static_export;
pub mod suggest;
pub mod suite;
pub mod validate;
pub mod vap;
