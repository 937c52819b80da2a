//! The rotation's decisions, pure: when to make a CA, add the next one,
//! switch to it, drop the previous one, or issue a serving certificate.

use super::error::{CertificatesError, CertificatesResult};

/// Lifetimes and margins, in seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// A serving certificate's lifetime.
    pub validity: i64,
    /// Renew a serving certificate this long before it expires.
    pub renew_before: i64,
    /// A CA's lifetime.
    pub ca_validity: i64,
    /// Start rotating a CA this long before it expires.
    pub ca_renew_before: i64,
    /// Between the steps of a CA rotation: long enough for kube-apiserver to
    /// see the new caBundle and for every replica to read the Secret.
    pub grace: i64,
}

impl Timing {
    /// Refuses margins that would make the rotations run into each other:
    /// a CA rotation (two grace periods) must be over before the serving
    /// certificate it signed has to be renewed.
    pub fn check(&self) -> CertificatesResult<()> {
        let refuse = |why: String| Err(CertificatesError::Timing(why));
        // A century at most: every sum of these (and the clock) then fits.
        const CENTURY: i64 = 100 * 365 * 86_400;
        for (flag, value) in [
            ("--certificate-validity", self.validity),
            ("--certificate-renew-before", self.renew_before),
            ("--ca-validity", self.ca_validity),
            ("--ca-renew-before", self.ca_renew_before),
            ("--ca-grace", self.grace),
        ] {
            if value > CENTURY {
                return refuse(format!("{flag} ({value}s): at most 100 years"));
            }
        }
        if self.renew_before <= 0 || self.renew_before >= self.validity {
            return refuse(format!(
                "--certificate-renew-before ({}s) must be above 0 and below --certificate-validity ({}s)",
                self.renew_before, self.validity
            ));
        }
        if self.ca_renew_before >= self.ca_validity {
            return refuse(format!(
                "--ca-renew-before ({}s) must be below --ca-validity ({}s)",
                self.ca_renew_before, self.ca_validity
            ));
        }
        if self.grace <= 0 || self.ca_renew_before < self.renew_before + 2 * self.grace {
            return refuse(format!(
                "--ca-renew-before ({}s) must be at least --certificate-renew-before ({}s) plus twice --ca-grace ({}s, above 0): a CA rotation takes two grace periods",
                self.ca_renew_before, self.renew_before, self.grace
            ));
        }
        Ok(())
    }
}

/// What the Secret needs next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RotationStep {
    /// Nothing: every certificate is good for now.
    Nothing,
    /// No usable CA (none yet, unreadable, or expired): a new CA and serving
    /// certificate, at once. Only at the first start, or after an outage
    /// longer than the CA's renewal margin.
    NewCa,
    /// The CA nears its end: make the next CA, which joins the caBundle.
    AddNextCa,
    /// The caBundle has carried the next CA for the grace period: it signs
    /// a new serving certificate; the old CA stays in the caBundle.
    SwitchToNextCa,
    /// The old CA has stayed in the caBundle for the grace period after the
    /// switch: every replica serves the new certificate; drop it.
    DropPreviousCa,
    /// The serving certificate is missing, not the CA's, not for the names,
    /// or within its renewal margin: issue one from the CA.
    IssueServing,
}

/// What [`decide`] needs to know of the Secret and the webhook configuration.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Facts {
    /// The CA's expiry; `None`: no CA with its key that parses.
    pub ca_not_after: Option<i64>,
    /// The serving certificate's expiry, and whether it fits (signed by the
    /// CA, its key matching, for exactly the names wanted).
    pub serving: Option<(i64, bool)>,
    /// Since when the next CA is in the Secret.
    pub next_since: Option<i64>,
    /// Since when the previous CA is kept for the caBundle.
    pub previous_since: Option<i64>,
    /// Every webhook the server keeps current trusts the next CA.
    pub bundle_trusts_next: bool,
}

/// What to do, given the certificates and `now` (seconds since the epoch).
pub fn decide(facts: &Facts, now: i64, timing: &Timing) -> RotationStep {
    let Some(ca_end) = facts.ca_not_after else {
        return RotationStep::NewCa;
    };
    if now >= ca_end {
        return RotationStep::NewCa;
    }
    if facts
        .previous_since
        .is_some_and(|since| now >= since + timing.grace)
    {
        return RotationStep::DropPreviousCa;
    }
    match facts.next_since {
        Some(since) if now >= since + timing.grace && facts.bundle_trusts_next => {
            return RotationStep::SwitchToNextCa;
        }
        None if facts.previous_since.is_none() && now >= ca_end - timing.ca_renew_before => {
            return RotationStep::AddNextCa;
        }
        _ => {}
    }
    match facts.serving {
        None | Some((_, false)) => RotationStep::IssueServing,
        // A certificate never outlives its CA: renewing makes sense only
        // when the new one would end later than the one served.
        Some((end, true))
            if now >= end - timing.renew_before && (now + timing.validity).min(ca_end) > end =>
        {
            RotationStep::IssueServing
        }
        Some(_) => RotationStep::Nothing,
    }
}
