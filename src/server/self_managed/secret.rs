//! The Secret's layout: which key holds which certificate, and the
//! annotations the grace periods count from.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;

use super::pem::Pair;
use super::stored::Stored;

/// The Secret's keys.
const CA_CRT: &str = "ca.crt";
const CA_KEY: &str = "ca.key";
const TLS_CRT: &str = "tls.crt";
const TLS_KEY: &str = "tls.key";
const NEXT_CA_CRT: &str = "next-ca.crt";
const NEXT_CA_KEY: &str = "next-ca.key";
const PREVIOUS_CA_CRT: &str = "previous-ca.crt";
/// When the next CA joined the caBundle, and when the previous one was
/// replaced (RFC 3339): where the grace periods count from.
const NEXT_SINCE: &str = "finalizer-guard.io/next-ca-since";
const PREVIOUS_SINCE: &str = "finalizer-guard.io/previous-ca-since";

impl Stored {
    /// Reads the Secret's data and annotations; what is missing or does not
    /// decode is absent (and so made anew).
    pub fn from_secret(secret: &Secret) -> Stored {
        let empty = BTreeMap::new();
        let data = secret.data.as_ref().unwrap_or(&empty);
        let text = |key: &str| {
            data.get(key)
                .and_then(|b| String::from_utf8(b.0.clone()).ok())
                .filter(|t| !t.trim().is_empty())
        };
        let pair = |cert: &str, key: &str| {
            Some(Pair {
                cert: text(cert)?,
                key: text(key)?,
            })
        };
        let annotations = secret.metadata.annotations.as_ref();
        let since = |key: &str| {
            annotations
                .and_then(|a| a.get(key))
                .and_then(|t| t.parse::<jiff::Timestamp>().ok())
                .map(|t| t.as_second())
        };
        Stored {
            ca: pair(CA_CRT, CA_KEY),
            serving: pair(TLS_CRT, TLS_KEY),
            next: pair(NEXT_CA_CRT, NEXT_CA_KEY).zip(since(NEXT_SINCE)),
            previous: text(PREVIOUS_CA_CRT).zip(since(PREVIOUS_SINCE)),
        }
    }

    /// Writes the certificates into `secret`'s data and annotations, leaving
    /// its other keys and annotations alone.
    pub fn to_secret(&self, secret: &mut Secret) {
        let data = secret.data.get_or_insert_with(BTreeMap::new);
        let mut put = |key: &str, value: Option<&str>| match value {
            Some(value) => {
                data.insert(key.to_string(), ByteString(value.as_bytes().to_vec()));
            }
            None => {
                data.remove(key);
            }
        };
        put(CA_CRT, self.ca.as_ref().map(|p| p.cert.as_str()));
        put(CA_KEY, self.ca.as_ref().map(|p| p.key.as_str()));
        put(TLS_CRT, self.serving.as_ref().map(|p| p.cert.as_str()));
        put(TLS_KEY, self.serving.as_ref().map(|p| p.key.as_str()));
        put(
            NEXT_CA_CRT,
            self.next.as_ref().map(|(p, _)| p.cert.as_str()),
        );
        put(NEXT_CA_KEY, self.next.as_ref().map(|(p, _)| p.key.as_str()));
        put(
            PREVIOUS_CA_CRT,
            self.previous.as_ref().map(|(c, _)| c.as_str()),
        );
        let annotations = secret
            .metadata
            .annotations
            .get_or_insert_with(BTreeMap::new);
        let mut stamp = |key: &str, since: Option<i64>| match since
            .and_then(|s| jiff::Timestamp::from_second(s).ok())
        {
            Some(at) => {
                annotations.insert(key.to_string(), at.to_string());
            }
            None => {
                annotations.remove(key);
            }
        };
        stamp(NEXT_SINCE, self.next.as_ref().map(|(_, s)| *s));
        stamp(PREVIOUS_SINCE, self.previous.as_ref().map(|(_, s)| *s));
    }
}
