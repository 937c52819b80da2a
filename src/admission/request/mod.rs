//! The one reading of an AdmissionReview: the request as a review reads it,
//! borrowed from the body, and the rules by which each field's shape reads.
//!
//! Every string a decision reads (uid, kind, resource, names, requester,
//! finalizers) points into the body unless JSON escapes make it differ from
//! its bytes; everything no decision reads (`options`, `requestKind`,
//! `requestResource`, the objects' `spec`, `status`, `data`,
//! `managedFields`, labels and most annotations) is skipped by the parser,
//! never built. The same reading serves the review, the reason a body is
//! refused (the same types, tracking the path) and the owned request a
//! recording keeps ([`super::lean`]): a finalizer list, `spec.finalizers`,
//! an annotation or a uid reads one way wherever it is read.
//!
//! The rules, where a shape is not the expected one:
//! - `metadata.finalizers`, `userInfo.groups`: `null` is empty; anything
//!   but a list of strings is refused, since a list read as empty could
//!   hide a removal.
//! - `spec.finalizers`: read only where `spec` is an object holding a list;
//!   any other shape reads as empty but is remembered as malformed (a custom
//!   resource's `spec` can be anything; a Namespace's is judged).
//! - annotations: `null` is empty, a value that is not a string reads as
//!   absent (an override that is simply not there); not a map is refused;
//!   an annotation a decision reads (the override's, an approval's) sent
//!   twice is refused by the review ([`super::review::Annotations::read`]).
//! - `metadata.deletionTimestamp`: a timestamp, or absent.
//! - a duplicated field a decision reads is refused: neither copy may win.
//! - fields no decision reads (the identity a recording keeps, the leak
//!   ledger): `IfString`, `IfObject`, `IfList` read any other shape
//!   as absent, never as a failure. The leak ledger's parts
//!   (`metadata.ownerReferences`, `status`, four fields of `spec`) are
//!   kept as sent while the body is read ([`LedgerParts`]), at the cost of
//!   skipping them, and read only for an override; as of any field kept,
//!   its key sent twice is refused.

mod fields;
mod lenient;
mod scan;

pub(crate) use fields::from_body;
pub use fields::{
    Extra, LedgerParts, LedgerSpecParts, MAX_EXTRA_KEYS, MAX_EXTRA_VALUES, Object, Request,
    RequestKind, Resource, Review, UserInfo,
};
pub(crate) use lenient::{IfList, IfObject, IfString, StringMap, deletion_timestamps};
pub use scan::Text;

/// Most names a list may hold (`metadata.finalizers`, `spec.finalizers`,
/// `userInfo.groups`). Each name read costs a decision far more memory than
/// its bytes in the body: a body of 8 MiB holds 940,000 tiny finalizers,
/// which took 180 MiB to judge. No object carries this many finalizers, nor
/// any user this many groups. A finalizer list longer is not held but
/// marked ([`Object::finalizers_too_many`]): an UPDATE it takes part in is
/// denied (would-deny in warn mode), never answered 400, which
/// kube-apiserver would settle by `failurePolicy`. A longer `groups`
/// (which only the authenticator sets) is refused (400).
pub use crate::policy::MAX_LIST_NAMES;
