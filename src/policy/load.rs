//! Reading a policy: the one place a policy meets the file system, and where
//! a file's checked sections and expanded presets are assembled into a [`Policy`].
//!
//! The CLI, `test`, the server's start and its reload all come through here,
//! so a file means the same everywhere: UTF-8 YAML, or refused.

use std::path::Path;

use super::config::{DEFAULT_POLICY_YAML, Policy, Rule};
use super::invalid::{InvalidPolicy, PolicyError};
use super::presets::{ExpandError, expand, known_names};
use super::schema::{self, PolicyFile};

/// Why a policy file could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{0}")]
    Read(#[source] std::io::Error),
    /// YAML is UTF-8: a file that is not would be read as something else than written.
    #[error("not UTF-8 (at byte {valid_up_to})")]
    NotUtf8 { valid_up_to: usize },
    #[error(transparent)]
    Invalid(#[from] InvalidPolicy),
}

/// Reads and validates the policy file at `path`.
pub fn load(path: &Path) -> Result<Policy, LoadError> {
    // A regular file, of a policy's size: a suite under review names its
    // policy file, and a FIFO or /dev/zero would never finish reading.
    let bytes = crate::files::read_regular(path, crate::files::MAX_POLICY_BYTES)
        .map_err(LoadError::Read)?;
    from_bytes(&bytes)
}

/// Validates a policy file's bytes, as [`load`] does once it has read them.
pub fn from_bytes(bytes: &[u8]) -> Result<Policy, LoadError> {
    let text = std::str::from_utf8(bytes).map_err(|e| LoadError::NotUtf8 {
        valid_up_to: e.valid_up_to(),
    })?;
    Ok(Policy::from_yaml(text)?)
}

impl Policy {
    /// Parses and validates a policy file's text: each section checked
    /// (`super::schema`), its presets expanded from the catalog.
    pub fn from_yaml(text: &str) -> Result<Policy, InvalidPolicy> {
        if text
            .lines()
            .all(|l| l.trim().is_empty() || l.trim_start().starts_with('#'))
        {
            return Err(InvalidPolicy(vec![PolicyError::Empty]));
        }
        // Bounded before it is built: a policy comes from anyone ([`crate::yaml`]).
        let file: PolicyFile = crate::yaml::from_str(text, &crate::yaml::POLICY)
            .map_err(|e| InvalidPolicy(vec![PolicyError::Syntax(e.to_string())]))?;
        assemble(file)
    }

    /// The embedded default policy.
    pub fn embedded_default() -> Policy {
        Policy::from_yaml(DEFAULT_POLICY_YAML).expect("the embedded default policy is valid")
    }
}

/// The policy of a parsed file, or every problem found in it, in file order.
fn assemble(file: PolicyFile) -> Result<Policy, InvalidPolicy> {
    let mut errors = Vec::new();
    let mut rules = schema::validate_rules(file.rules, &mut errors);
    let builtin_identities = schema::validate_identities(file.builtin_identities, &mut errors);
    rules.extend(expand_presets(file.presets, &mut errors));
    let override_settings = schema::validate_override(file.r#override, &mut errors);
    if !errors.is_empty() {
        return Err(InvalidPolicy(errors));
    }
    Ok(Policy {
        mode: file.mode,
        builtin_controllers: file.builtin_controllers,
        builtin_identities,
        rules,
        override_settings,
    })
}

/// `presets:`: each entry's rules ([`expand`]), after the file's own.
fn expand_presets(entries: Vec<serde_yaml_ng::Value>, errors: &mut Vec<PolicyError>) -> Vec<Rule> {
    let mut rules = Vec::new();
    let mut seen: Vec<String> = Vec::new();
    for (index, entry) in entries.into_iter().enumerate() {
        let before = errors.len();
        let Some(reference) = schema::preset_ref(index, entry, errors) else {
            continue;
        };
        match expand(&reference) {
            Ok(expanded) => {
                for rule in &expanded {
                    if let Some(first) = seen.iter().position(|l| *l == rule.label) {
                        errors.push(PolicyError::DuplicatePreset {
                            index,
                            first: rules_index(&rules, first),
                            name: reference.name.clone(),
                        });
                    }
                }
                if errors.len() == before {
                    for rule in &expanded {
                        seen.push(rule.label.clone());
                    }
                    rules.extend(expanded.into_iter().map(|r| (index, r)));
                }
            }
            Err(ExpandError::UnknownPreset) => errors.push(PolicyError::UnknownPreset {
                index,
                name: reference.name,
                known: known_names(),
            }),
            Err(ExpandError::UnknownComponent { known }) => {
                errors.push(PolicyError::UnknownPresetComponent {
                    index,
                    name: reference.name,
                    known,
                })
            }
        }
    }
    rules.into_iter().map(|(_, r)| r).collect()
}

/// The `presets[N]` index of the `n`th expanded rule.
fn rules_index(rules: &[(usize, Rule)], n: usize) -> usize {
    rules.get(n).map_or(0, |(index, _)| *index)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_utf8_is_refused_not_replaced() {
        let e = from_bytes(b"mode: enforce\nrules: []\n# caf\xe9\n").unwrap_err();
        assert!(matches!(e, LoadError::NotUtf8 { valid_up_to: 29 }), "{e:?}");
        assert!(from_bytes(b"mode: warn\n").is_ok());
        assert!(matches!(
            load(Path::new("/nonexistent/policy.yaml")),
            Err(LoadError::Read(_))
        ));
    }
}
