//! `policy presets`: the catalog of well-known controllers
//! ([`crate::policy::presets`]), for people (`-o text`), scripts (`-o json`)
//! and e2e/presets/check-sources.sh (`--sources`).

use std::io::{self, Write};

use serde::Serialize;

use crate::error::Result;
use crate::output::{OutputFlag, Printer, Report, escape};
use crate::policy::presets::{self, Preset, PresetRef};

/// The catalog as printed.
#[derive(Debug, Serialize)]
pub struct CatalogReport {
    pub presets: &'static [Preset],
}

impl Report for CatalogReport {
    fn write_text(&self, out: &mut dyn Write) -> io::Result<()> {
        for (i, p) in self.presets.iter().enumerate() {
            if i > 0 {
                writeln!(out)?;
            }
            writeln!(out, "{} ({}), namespace {}", p.name, p.title, p.namespace)?;
            let rules = presets::expand(&PresetRef {
                name: p.name.clone(),
                ..PresetRef::default()
            })
            .map_err(|e| io::Error::other(format!("{e:?}")))?;
            for rule in &rules {
                writeln!(
                    out,
                    "  {}: {}",
                    rule.label,
                    escape(&presets::describe(rule))
                )?;
            }
            for s in &p.sources {
                writeln!(out, "  source: {} {}", s.origin(), s.file)?;
            }
            for l in &p.left_out {
                writeln!(
                    out,
                    "  left out: {}: {}",
                    escape(&l.finalizer),
                    escape(&l.reason)
                )?;
            }
        }
        Ok(())
    }
}

/// `policy presets`: exit 0.
pub fn run(output: OutputFlag, sources: bool) -> Result<i32> {
    let catalog = CatalogReport {
        presets: presets::catalog(),
    };
    if sources {
        // One line per cited string: KIND, MODULE or OWNER/REPO, VERSION or
        // COMMIT, FILE, STRING, tab-separated (no catalog string holds a tab
        // or a newline: a unit test says so).
        let mut out = io::stdout().lock();
        for p in catalog.presets {
            for s in &p.sources {
                let (origin, at) = match (&s.module, &s.version, &s.github, &s.commit) {
                    (Some(m), Some(v), _, _) => (m, v),
                    (_, _, Some(repo), Some(commit)) => (repo, commit),
                    _ => continue,
                };
                for string in &s.strings {
                    writeln!(
                        out,
                        "{}\t{}\t{origin}\t{at}\t{}\t{string}",
                        p.name,
                        s.kind(),
                        s.file
                    )
                    .map_err(crate::error::Error::stdout)?;
                }
            }
        }
        return Ok(0);
    }
    Printer::stdio(output.format)
        .report(&catalog)
        .map_err(crate::error::Error::stdout)?;
    Ok(0)
}
