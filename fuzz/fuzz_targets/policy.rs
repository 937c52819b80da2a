//! Arbitrary text through the policy parser. A policy it accepts holds what
//! validation promises, and decides a review without panicking.
#![no_main]

use std::sync::LazyLock;

use finalizer_guard::admission::review_at;
use finalizer_guard::policy::Policy;
use libfuzzer_sys::fuzz_target;

const REVIEWS: [&[u8]; 2] = [
    include_bytes!("../../examples/reviews/pod-strip-finalizers-override.json"),
    include_bytes!("../../examples/reviews/namespace-finalize-stuck.json"),
];

static CLOCK: LazyLock<jiff::Timestamp> = LazyLock::new(|| "2026-11-21T08:00:00Z".parse().unwrap());

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let policy = match Policy::from_yaml(text) {
        Ok(policy) => policy,
        Err(errors) => {
            assert!(!errors.0.is_empty());
            return;
        }
    };
    let settings = &policy.override_settings;
    assert!(!settings.reasons.is_empty());
    assert!(
        settings
            .reasons
            .iter()
            .all(|r| !r.is_empty() && !r.contains(':'))
    );
    assert!(!settings.annotation.is_empty());
    for rule in &policy.rules {
        assert!(!rule.finalizers.is_empty(), "{}", rule.label);
        assert!(
            !(rule.users.is_empty() && rule.groups.is_empty() && rule.service_accounts.is_empty()),
            "{}",
            rule.label
        );
        assert!(rule.namespaces.as_ref().is_none_or(|n| !n.is_empty()));
        assert!(rule.resources.as_ref().is_none_or(|r| !r.is_empty()));
    }
    if let Some(approval) = &settings.approval {
        assert!(approval.max_age.is_positive());
        assert!(!(approval.users.is_empty() && approval.groups.is_empty()));
    }
    for body in REVIEWS {
        let reviewed = review_at(&policy, body, *CLOCK).expect("the example reviews are valid");
        assert!(reviewed.allowed() || policy.mode == finalizer_guard::policy::Mode::Enforce);
    }
});
