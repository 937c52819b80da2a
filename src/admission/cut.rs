//! How much of one string taken from the request the webhook keeps: what an
//! audit record, the override ledger, `userInfo.extra` and an Event carry of
//! each. Below every file that cuts, so none of them imports another for it.

use std::borrow::Cow;

use crate::policy::text::truncated;

/// How much of one string taken from the request (uid, user, each group,
/// resource, kind, apiVersion, subresource, namespace, name, object uid,
/// finalizer, override reason and detail, approver) a record keeps: far
/// more than Kubernetes lets any of them be, far less than a body can carry.
pub const MAX_AUDITED_CHARS: usize = 512;

/// A string taken from the request, as a record keeps it.
pub fn cut(s: &str) -> Cow<'_, str> {
    truncated(s, MAX_AUDITED_CHARS)
}
