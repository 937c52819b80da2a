//! `policy validate`: is this a policy `serve` would serve? Optionally also:
//! is this file its `policy export --vap`, is this folder its
//! `policy export --static`?

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::export::StaticFlags;
use super::{static_export, vap};
use crate::error::{Error, Result};
use crate::output::{Format, Printer, Report, escape};
use crate::policy::{self, LoadError, Policy};

/// `policy validate`'s settings, from the command line.
#[derive(Debug)]
pub struct Validate {
    pub format: Format,
    /// `--vap FILE`: also check that FILE is the policy's export.
    pub vap: Option<PathBuf>,
    /// `--strict`: every warning fails the policy.
    pub strict: bool,
    /// `--static DIR`: also check that DIR is the policy's static export.
    pub static_dir: Option<PathBuf>,
    pub static_flags: StaticFlags,
    /// The policy file.
    pub file: PathBuf,
}

/// What `policy validate` found.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Validation {
    pub file: String,
    pub valid: bool,
    /// Why it is refused, each naming its field (and line).
    pub errors: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<PolicySummary>,
    /// Warn mode: the built-in controllers enforce mode would block.
    pub would_block: Vec<String>,
    /// Rules that can match nothing, or switch the guard off for everyone.
    pub warnings: Vec<String>,
    /// `--strict`: every warning (these, and `wouldBlock`) fails the policy.
    pub strict: bool,
    /// What the policy's `presets:` expand to, one rule each.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub presets: Vec<PresetRule>,
}

/// One rule a preset expands to.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PresetRule {
    pub rule: String,
    pub finalizers: Vec<String>,
    /// Full usernames.
    pub service_accounts: Vec<String>,
    pub groups: Vec<String>,
    /// `resource.group`; absent: any resource.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resources: Option<Vec<String>>,
    /// The rule in a sentence.
    pub description: String,
}

impl PresetRule {
    fn of(rule: &policy::config::Rule) -> PresetRule {
        PresetRule {
            rule: rule.label.clone(),
            finalizers: rule.finalizers.iter().map(ToString::to_string).collect(),
            service_accounts: rule.service_accounts.clone(),
            groups: rule.groups.clone(),
            resources: rule
                .resources
                .as_ref()
                .map(|rs| rs.iter().map(ToString::to_string).collect()),
            description: policy::presets::describe(rule),
        }
    }
}

/// A valid policy, in brief.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicySummary {
    pub mode: &'static str,
    pub rules: usize,
    pub builtin_controllers: bool,
    pub override_annotation: String,
}

impl Validation {
    /// Runs the checks `serve` runs on a policy that parsed: [`crate::policy::servable::servable`].
    fn of(file: &Path, policy: &Policy) -> Validation {
        let mut v = Validation::refused(file, Vec::new());
        match crate::policy::servable::servable(policy) {
            Err(blocked) => v.errors = vec![Error::BlocksBuiltinControllers(blocked).to_string()],
            Ok(warned) => {
                v.valid = true;
                v.would_block = warned.iter().map(ToString::to_string).collect();
                v.warnings = policy.warnings().iter().map(ToString::to_string).collect();
                v.presets = policy
                    .rules
                    .iter()
                    .filter(|r| r.label.starts_with("preset:"))
                    .map(PresetRule::of)
                    .collect();
                v.policy = Some(PolicySummary {
                    mode: policy.mode.as_str(),
                    rules: policy.rules.len(),
                    builtin_controllers: policy.builtin_controllers,
                    override_annotation: policy.override_settings.annotation.clone(),
                });
            }
        }
        v
    }

    /// `--static DIR`: refused unless DIR is the policy's static export with these flags.
    fn check_static(
        &mut self,
        policy: &Policy,
        file: &Path,
        dir: &Path,
        flags: &StaticFlags,
    ) -> Result<()> {
        let options = flags.options(dir)?;
        let found = static_export::read_dir(dir).map_err(|e| Error::io(dir, e))?;
        if let Err(e) = static_export::verify(policy, &options, &found) {
            self.refuse(format!(
                "{}: not `finalizer-guard policy export --static` of {} with these flags: {e}; export it again",
                dir.display(),
                file.display()
            ));
        }
        Ok(())
    }

    /// `--vap FILE`: refused unless FILE is the policy's `policy export --vap`.
    fn check_vap(&mut self, policy: &Policy, file: &Path, vap: &Path) -> Result<()> {
        // A regular file of a policy's size at most: a pull request may bring it.
        let bytes = crate::files::read_regular(vap, crate::files::MAX_POLICY_BYTES)
            .map_err(|e| Error::io(vap, e))?;
        let yaml = String::from_utf8_lossy(&bytes);
        if let Err(e) = vap::verify(policy, &yaml) {
            self.refuse(format!(
                "{}: not `finalizer-guard policy export --vap {}`: {e}; export it again from this policy",
                vap.display(),
                file.display()
            ));
        }
        Ok(())
    }

    /// Valid as a policy, refused for what goes with it.
    fn refuse(&mut self, error: String) {
        self.valid = false;
        self.policy = None;
        self.errors.push(error);
    }

    fn refused(file: &Path, errors: Vec<String>) -> Validation {
        Validation {
            file: file.display().to_string(),
            valid: false,
            errors,
            policy: None,
            would_block: Vec::new(),
            warnings: Vec::new(),
            presets: Vec::new(),
            strict: false,
        }
    }

    /// `--strict`: a valid policy with any warning is refused, the
    /// warnings still listed, each naming its rule and the fix.
    fn strictly(&mut self) {
        self.strict = true;
        let count = self.warnings.len() + self.would_block.len();
        if self.valid && count > 0 {
            self.valid = false;
            self.policy = None;
            self.errors.push(format!(
                "refused under --strict: {count} warning{} (each below)",
                if count == 1 { "" } else { "s" }
            ));
        }
    }
}

impl Report for Validation {
    fn write_text(&self, out: &mut dyn Write) -> io::Result<()> {
        let file = escape(&self.file);
        for e in &self.errors {
            writeln!(out, "{file}: {}", escape(e))?;
        }
        if let Some(p) = &self.policy {
            writeln!(
                out,
                "{file}: valid (mode {}, {} rules, builtinControllers {}, override annotation {})",
                p.mode,
                p.rules,
                p.builtin_controllers,
                escape(&p.override_annotation)
            )?;
        }
        for preset in &self.presets {
            writeln!(
                out,
                "{file}: {}: {}",
                escape(&preset.rule),
                escape(&preset.description)
            )?;
        }
        // Valid, but what can match nothing was surely meant to match something.
        for warning in &self.warnings {
            writeln!(out, "{file}: warning: {}", escape(warning))?;
        }
        Ok(())
    }
}

/// `policy validate`: exit 0, or 1 with one error per line; 2 when the file
/// cannot be read. It refuses what `serve` refuses, through the same checks:
/// the policy parser, then [`crate::policy::servable::servable`].
pub fn run(validate: Validate) -> Result<i32> {
    let Validate {
        format,
        vap,
        strict,
        static_dir,
        static_flags,
        file,
    } = validate;
    let report = match policy::load(&file) {
        Ok(policy) => {
            let mut report = Validation::of(&file, &policy);
            if let Some(dir) = static_dir.filter(|_| report.valid) {
                report.check_static(&policy, &file, &dir, &static_flags)?;
            }
            if let Some(vap) = vap.filter(|_| report.valid) {
                report.check_vap(&policy, &file, &vap)?;
            }
            if strict {
                report.strictly();
            }
            report
        }
        Err(LoadError::Invalid(invalid)) => {
            Validation::refused(&file, invalid.0.iter().map(ToString::to_string).collect())
        }
        Err(e) => return Err(Error::policy(&file, e)),
    };
    let out = Printer::stdio(format);
    for b in &report.would_block {
        out.note(format_args!(
            "warning: {}: served in warn mode, refused in enforce mode: it would block the {b}",
            file.display()
        ));
    }
    out.report(&report).map_err(Error::stdout)?;
    Ok(i32::from(!report.valid))
}
