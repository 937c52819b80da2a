//! The webhook's seal on a two-person approval.
//!
//! Annotations prove nothing by themselves: anyone who can write an object,
//! or a template a controller copies onto objects (a Job's pod template), can
//! write the three approval annotations. What the webhook alone can do is
//! sign: an approval counts only if it carries the seal the webhook computes
//! for it, and the webhook computes one only for a write it judged as an
//! approver's under the policy that requires approvals.
//!
//! The seal is an HMAC-SHA256 over the object's uid, the three annotation
//! values and the policy's approval settings (mode included), under a key
//! derived from the webhook's serving key. So it cannot be copied to another
//! object (or to a new object that took the same name), outlives neither a
//! change of approvers, of `maxAge` or of the mode, nor a new serving key.
//! Every replica serving the same certificate seals alike.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::hmac;

use super::config::{Approval, Mode, OverrideSettings};

/// The annotation that carries the seal, beside the three an approver writes.
pub const APPROVAL_SEAL: &str = "finalizer-guard.io/approval-seal";

/// The version prefix of a seal's value.
const VERSION: &str = "v1.";

/// The key the webhook seals approvals with.
#[derive(Clone)]
pub struct SealKey(hmac::Key);

impl std::fmt::Debug for SealKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SealKey(..)")
    }
}

/// What a seal covers: the object and the approval written on it.
#[derive(Debug, Clone, Copy)]
pub struct Sealed<'a> {
    /// `metadata.uid`: the seal holds for this object only.
    pub uid: &'a str,
    /// The override annotation's value.
    pub value: &'a str,
    pub approved_by: &'a str,
    pub expires: &'a str,
}

impl SealKey {
    /// The key derived from secret bytes: the serving certificate's private
    /// key, which only the webhook's pods hold.
    pub fn derive(secret: &[u8]) -> SealKey {
        let domain = hmac::Key::new(hmac::HMAC_SHA256, b"finalizer-guard approval seal v1");
        let derived = hmac::sign(&domain, secret);
        SealKey(hmac::Key::new(hmac::HMAC_SHA256, derived.as_ref()))
    }

    /// The seal of `sealed` under the policy's settings: `v1.` and the MAC in base64url.
    pub fn seal(
        &self,
        sealed: &Sealed<'_>,
        mode: Mode,
        settings: &OverrideSettings,
        approval: &Approval,
    ) -> String {
        let tag = hmac::sign(&self.0, &message(sealed, mode, settings, approval));
        format!("{VERSION}{}", URL_SAFE_NO_PAD.encode(tag.as_ref()))
    }

    /// Whether `seal` is this key's seal of `sealed` (compared in constant time).
    pub fn verify(
        &self,
        sealed: &Sealed<'_>,
        mode: Mode,
        settings: &OverrideSettings,
        approval: &Approval,
        seal: &str,
    ) -> bool {
        let Some(tag) = seal
            .strip_prefix(VERSION)
            .and_then(|b64| URL_SAFE_NO_PAD.decode(b64).ok())
        else {
            return false;
        };
        hmac::verify(&self.0, &message(sealed, mode, settings, approval), &tag).is_ok()
    }
}

/// The bytes sealed: each field length-prefixed, so no two different
/// approvals read as the same message.
fn message(
    sealed: &Sealed<'_>,
    mode: Mode,
    settings: &OverrideSettings,
    approval: &Approval,
) -> Vec<u8> {
    let mut users = approval.users.clone();
    users.sort();
    let mut groups = approval.groups.clone();
    groups.sort();
    let max_age = format!("{:#}", approval.max_age);
    let mode = match mode {
        Mode::Enforce => "enforce",
        Mode::Warn => "warn",
    };
    let mut fields: Vec<&str> = vec![
        sealed.uid,
        sealed.value,
        sealed.approved_by,
        sealed.expires,
        mode,
        &settings.annotation,
        &max_age,
        "users",
    ];
    fields.extend(users.iter().map(String::as_str));
    fields.push("groups");
    fields.extend(groups.iter().map(String::as_str));
    let mut out = Vec::with_capacity(fields.iter().map(|f| f.len() + 8).sum());
    for field in fields {
        out.extend_from_slice(&(field.len() as u64).to_be_bytes());
        out.extend_from_slice(field.as_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::config::Policy;

    fn policy(yaml: &str) -> Policy {
        Policy::from_yaml(yaml).unwrap()
    }

    const TWO_PERSON: &str = "override:\n  approval:\n    users: [sec-lead]\n    maxAge: 2h\n";

    fn sealed(uid: &str) -> Sealed<'_> {
        Sealed {
            uid,
            value: "node-lost: INC-1",
            approved_by: "sec-lead",
            expires: "2026-11-21T09:00:00Z",
        }
    }

    fn seal_under(key: &SealKey, p: &Policy, s: &Sealed<'_>) -> String {
        let settings = &p.override_settings;
        key.seal(s, p.mode, settings, settings.approval.as_ref().unwrap())
    }

    fn verify_under(key: &SealKey, p: &Policy, s: &Sealed<'_>, seal: &str) -> bool {
        let settings = &p.override_settings;
        key.verify(
            s,
            p.mode,
            settings,
            settings.approval.as_ref().unwrap(),
            seal,
        )
    }

    #[test]
    fn a_seal_holds_for_its_object_approval_key_and_policy_only() {
        let key = SealKey::derive(b"serving key");
        let p = policy(TWO_PERSON);
        let seal = seal_under(&key, &p, &sealed("uid-1"));
        assert!(seal.starts_with("v1.") && seal.len() == 3 + 43, "{seal}");
        assert!(verify_under(&key, &p, &sealed("uid-1"), &seal));

        // Another object, even one that took the same name.
        assert!(!verify_under(&key, &p, &sealed("uid-2"), &seal));
        // Another value, approver or expiry.
        for changed in [
            Sealed {
                value: "node-lost: INC-2",
                ..sealed("uid-1")
            },
            Sealed {
                approved_by: "sec-lead2",
                ..sealed("uid-1")
            },
            Sealed {
                expires: "2999-01-01T00:00:00Z",
                ..sealed("uid-1")
            },
        ] {
            assert!(!verify_under(&key, &p, &changed, &seal), "{changed:?}");
        }
        // Another key: a new serving key, or a webhook that is not this one.
        assert!(!verify_under(
            &SealKey::derive(b"other key"),
            &p,
            &sealed("uid-1"),
            &seal
        ));
        // Another mode, other approvers, another maxAge, another annotation.
        for other in [
            "mode: warn\noverride:\n  approval:\n    users: [sec-lead]\n    maxAge: 2h\n",
            "override:\n  approval:\n    users: [sec-lead, eve]\n    maxAge: 2h\n",
            "override:\n  approval:\n    users: [sec-lead]\n    groups: [devs]\n    maxAge: 2h\n",
            "override:\n  approval:\n    users: [sec-lead]\n    maxAge: 3h\n",
            "override:\n  annotation: example.com/o\n  approval:\n    users: [sec-lead]\n    maxAge: 2h\n",
        ] {
            assert!(
                !verify_under(&key, &policy(other), &sealed("uid-1"), &seal),
                "{other}"
            );
        }
        // Malformed seals never verify, and never panic.
        for bad in ["", "v1.", "v2.abc", "v1.!!!!", &seal[..seal.len() - 1]] {
            assert!(!verify_under(&key, &p, &sealed("uid-1"), bad), "{bad:?}");
        }
    }

    #[test]
    fn fields_cannot_be_shifted_into_each_other() {
        let key = SealKey::derive(b"k");
        let p = policy(TWO_PERSON);
        let a = Sealed {
            uid: "ab",
            value: "c",
            ..sealed("")
        };
        let b = Sealed {
            uid: "a",
            value: "bc",
            ..sealed("")
        };
        assert_ne!(seal_under(&key, &p, &a), seal_under(&key, &p, &b));
    }
}
