//! Where two JSON documents first differ: what `policy export --vap` and
//! `--static` name when a file is not the export of a policy.

use serde_json::Value;

/// How a key that only one side holds is written into the path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MissingKey {
    /// As it is.
    AsIs,
    /// Escaped ([`crate::output::escape`]): the key came from a file.
    Escaped,
}

/// The path of the first field where `a` and `b` differ
/// (`spec.variables[3].expression`), below `at`.
pub fn first_difference(a: &Value, b: &Value, at: &str, missing: MissingKey) -> Option<String> {
    let join = |key: &str| {
        if at.is_empty() {
            key.to_string()
        } else {
            format!("{at}.{key}")
        }
    };
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            keys.into_iter().find_map(|k| match (x.get(k), y.get(k)) {
                (Some(p), Some(q)) => first_difference(p, q, &join(k), missing),
                _ => Some(match missing {
                    MissingKey::AsIs => join(k),
                    MissingKey::Escaped => join(&crate::output::escape(k)),
                }),
            })
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .enumerate()
            .find_map(|(i, (p, q))| first_difference(p, q, &format!("{at}[{i}]"), missing)),
        _ if a == b => None,
        _ => Some(at.to_string()),
    }
}
