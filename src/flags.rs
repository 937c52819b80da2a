//! Flags more than one command takes, parsed one way: durations,
//! `--policy` and the offline commands' `--max-body-bytes`. Both the command line ([`crate::cli`]) and the commands that
//! talk to a cluster ([`crate::cluster`]) use them; neither imports the other
//! for them.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;

/// The environment variable that names the policy file where no `--policy`
/// is given: read by `serve`, `check` and the offline `doctor`, never by a
/// command that talks to a cluster (it judges the cluster's own policy).
pub const POLICY_ENV: &str = "FINALIZER_GUARD_POLICY";

/// `--cluster-name NAME` of `serve` and `watch`: the cluster's name on
/// every Event they write (annotation
/// [`crate::trail::events::CLUSTER_ANNOTATION`]) and, for `serve`, in every
/// audit record.
#[derive(Debug, Clone, Default, Args)]
pub struct ClusterNameFlag {
    /// The name of the cluster, on every Event written (annotation
    /// `finalizer-guard.io/cluster`) and, for serve, in every audit record (`"cluster"`):
    /// one log pipeline often collects many clusters' records.
    #[arg(id = "cluster_name", long = "cluster-name", env = "FINALIZER_GUARD_CLUSTER_NAME", value_name = "NAME", value_parser = own_words(cluster_name))]
    pub name: Option<String>,
}

/// A cluster's name for `--cluster-name` (`serve`, `watch`): 1 to 128 characters,
/// letters, digits, `-`, `_`, `.`, `:` and `/` (what EKS ARNs, GKE and AKS names
/// and kubeconfig contexts use), so that it reads the same in every record
/// and metric it reaches.
pub fn cluster_name(s: &str) -> Result<String, String> {
    let valid = !s.is_empty()
        && s.len() <= 128
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':' | b'/'));
    named(
        s,
        valid,
        "a cluster name",
        "1 to 128 characters: letters, digits, '-', '_', '.', ':' and '/' (e.g. prod-eu-1)",
    )
}

/// A namespace's name (`--namespace`): a DNS label, as Kubernetes names
/// namespaces. The serving certificate is made for `SERVICE.NAMESPACE.svc`,
/// which must be a name kube-apiserver can check.
pub fn dns_label(s: &str) -> Result<String, String> {
    named(
        s,
        crate::policy::is_dns_label(s),
        "a namespace name",
        "1 to 63 lowercase letters, digits and '-', starting and ending with a letter or digit",
    )
}

/// A Service's name (`--service`): a DNS label that starts with a letter
/// (RFC 1035), as Kubernetes names Services.
pub fn service_name(s: &str) -> Result<String, String> {
    named(
        s,
        crate::policy::is_dns_label(s) && s.starts_with(|c: char| c.is_ascii_lowercase()),
        "a Service name",
        "1 to 63 lowercase letters, digits and '-', starting with a letter and ending with a letter or digit",
    )
}

/// An extra DNS name for a serving certificate (`certs --dns`, `serve
/// --certificate-dns`): lowercase RFC 1123 labels joined by dots, at most
/// 253 characters, the first label `*` for a wildcard.
pub fn dns_name(s: &str) -> Result<String, String> {
    if s.parse::<std::net::IpAddr>().is_ok() {
        return Err(format!(
            "{} is an IP address, which a TLS check matches only against IP addresses: give it with --ip (certs) or --certificate-ip (serve)",
            shown_value(s)
        ));
    }
    let labels = s.strip_prefix("*.").unwrap_or(s);
    named(
        s,
        s.len() <= 253 && labels.split('.').all(crate::policy::is_dns_label),
        "a DNS name",
        "lowercase labels of letters, digits and '-' joined by '.', at most 253 characters (e.g. webhook.example.com, *.example.com)",
    )
}

/// A name flag's value when `valid`; otherwise what it says: the value
/// ([`shown_value`]) is not `not_a`, give `give`.
fn named(s: &str, valid: bool, not_a: &str, give: &str) -> Result<String, String> {
    if valid {
        Ok(s.to_string())
    } else {
        Err(format!("{} is not {not_a}: give {give}", shown_value(s)))
    }
}

/// Most characters of a bad value an error repeats.
const MAX_SHOWN_VALUE_CHARS: usize = 64;

/// A bad value as an error repeats it: quoted, escaped, and cut past
/// [`MAX_SHOWN_VALUE_CHARS`] characters.
pub(crate) fn shown_value(s: &str) -> String {
    crate::output::quoted(&crate::policy::text::truncated(s, MAX_SHOWN_VALUE_CHARS))
}

/// A value parser whose error is only what `parse` says, the value quoted,
/// escaped and cut there (`shown_value`): clap's own `invalid value '...'`
/// repeats the value raw and whole (a newline, a terminal's escape sequence,
/// 100,000 characters) before it.
pub fn own_words<T, F>(parse: F) -> OwnWords<F>
where
    F: Fn(&str) -> Result<T, String> + Clone + Send + Sync + 'static,
    T: Clone + Send + Sync + 'static,
{
    OwnWords(parse)
}

/// See [`own_words`].
#[derive(Clone)]
pub struct OwnWords<F>(F);

impl<T, F> clap::builder::TypedValueParser for OwnWords<F>
where
    F: Fn(&str) -> Result<T, String> + Clone + Send + Sync + 'static,
    T: Clone + Send + Sync + 'static,
{
    type Value = T;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<T, clap::Error> {
        let flag = arg.map_or_else(|| "the value".to_string(), |a| format!("'{a}'"));
        let said = match value.to_str() {
            Some(text) => (self.0)(text),
            None => Err("the value is not UTF-8".to_string()),
        };
        said.map_err(|e| {
            clap::Error::raw(
                clap::error::ErrorKind::ValueValidation,
                format!("invalid value for {flag}: {e}\n\nFor more information, try '--help'.\n"),
            )
            .with_cmd(cmd)
        })
    }
}

/// Parses `500ms`, `5s`, `2m`, `1h`, `1h30m` (and ISO 8601 `PT5S`). The error
/// says what is accepted: it is what a person reads after a typo.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    const ACCEPTED: &str = "a number and a unit, ms, s, m or h: e.g. 500ms, 30s, 30m, 2h or 1h30m";
    let quoted = shown_value(s);
    let d: jiff::SignedDuration = s.parse().map_err(|_| {
        if s.parse::<jiff::Span>().is_ok() {
            format!(
                "{quoted}: days, weeks, months and years are not accepted (their length varies); give {ACCEPTED}"
            )
        } else {
            format!("{quoted} is not a duration: give {ACCEPTED}")
        }
    })?;
    Duration::try_from(d).map_err(|_| format!("{quoted} is negative: give {ACCEPTED}"))
}

/// A connection timeout of `serve` (`--header-timeout` and the like): from
/// a second to an hour. Shorter ones would cut off clients on any network,
/// and have idle connections looked at every millisecond; longer ones hold
/// a connection's memory for nothing.
pub fn parse_timeout(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d < Duration::from_secs(1) {
        return Err(format!(
            "{} is shorter than a second: give 1s to 1h",
            shown_value(s)
        ));
    }
    if d > Duration::from_secs(3600) {
        return Err(format!(
            "{} is longer than an hour: give 1s to 1h",
            shown_value(s)
        ));
    }
    Ok(d)
}

/// `--policy FILE`: the policy to judge under, in place of the command's
/// own (the environment's or the embedded one offline, the cluster's for a
/// command that talks to a cluster, each suite's own for `test`).
#[derive(Debug, Clone, Default, Args)]
pub struct PolicyFlag {
    /// Policy file (YAML) to decide under. Default: offline, $FINALIZER_GUARD_POLICY, then
    /// the embedded policy; talking to a cluster, the cluster's own (its ConfigMap; the
    /// environment is not read); `test`, each suite's own.
    #[arg(id = "policy", long = "policy", value_name = "FILE")]
    pub file: Option<PathBuf>,
}

/// `--max-body-bytes` of `check` and `test`: the largest review file read,
/// as the webhook's own flag (and its environment variable) bounds a body.
#[derive(Debug, Clone, Copy, Args)]
pub struct MaxBodyFlag {
    /// Largest review, recording or case file read, as the webhook's --max-body-bytes:
    /// a larger one is an input error.
    #[arg(
        id = "max_body_bytes",
        long = "max-body-bytes",
        env = "FINALIZER_GUARD_MAX_BODY_BYTES",
        default_value_t = crate::files::DEFAULT_MAX_BODY_BYTES,
        value_name = "BYTES"
    )]
    pub bytes: usize,
}

impl PolicyFlag {
    /// The file given, else the one [`POLICY_ENV`] names (offline commands:
    /// the environment names the policy as it does for `serve`).
    pub fn or_env(self) -> Option<PathBuf> {
        self.file.or_else(|| {
            std::env::var_os(POLICY_ENV)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        })
    }

    pub fn path(&self) -> Option<&Path> {
        self.file.as_deref()
    }
}

/// Whether [`POLICY_ENV`] is set: a command that does not read it says so.
pub fn policy_env_is_set() -> bool {
    std::env::var_os(POLICY_ENV).is_some_and(|v| !v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert!(parse_duration("-5s").unwrap_err().contains("negative"));
        for (typed, said) in [
            (
                "soon",
                "\"soon\" is not a duration: give a number and a unit, ms, s, m or h",
            ),
            ("30", "\"30\" is not a duration"),
            (
                "1y",
                "\"1y\": days, weeks, months and years are not accepted",
            ),
            (
                "2d",
                "\"2d\": days, weeks, months and years are not accepted",
            ),
        ] {
            let e = parse_duration(typed).unwrap_err();
            assert!(e.starts_with(said), "{typed}: {e}");
            assert!(e.contains("30m"), "{typed}: {e}");
            assert!(!e.contains("jiff"), "{typed}: no library talk: {e}");
        }
    }

    #[test]
    fn connection_timeouts_are_a_second_to_an_hour() {
        assert_eq!(parse_timeout("1s"), Ok(Duration::from_secs(1)));
        assert_eq!(parse_timeout("1h"), Ok(Duration::from_secs(3600)));
        for typed in ["0s", "999ms", "1h1s", "99999999h"] {
            let e = parse_timeout(typed).unwrap_err();
            assert!(e.ends_with("give 1s to 1h"), "{typed}: {e}");
        }
        assert!(
            parse_timeout("soon")
                .unwrap_err()
                .contains("not a duration")
        );
    }
}
