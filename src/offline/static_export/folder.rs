//! The export's folder: written (a new or empty folder, or a previous
//! export replaced in place), read back, and compared with what the policy
//! renders to.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::render::{File, KNOWN_FILES, Options, POLICIES, StaticError, WEBHOOKS, render};
use crate::files::{Access, NewFile, replace};
use crate::offline::difference::{MissingKey, first_difference};
use crate::policy::config::Policy;

/// Why a directory is not the export of a policy.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StaticVerifyError {
    #[error("{0}")]
    Export(#[from] StaticError),
    #[error("{0}: missing")]
    Missing(String),
    #[error("{0}: not written by this export")]
    Extra(String),
    #[error("{file}: not readable: {why}")]
    Unreadable { file: String, why: String },
    #[error("{file}: not YAML: {why}")]
    Yaml { file: String, why: String },
    #[error("{file}: holds {found} objects where the export has {want}")]
    Count {
        file: String,
        found: usize,
        want: usize,
    },
    #[error("{file}: the {object} differs from the export at {at}")]
    Differs {
        file: String,
        object: String,
        at: String,
    },
}

/// Why the export was not written.
#[derive(Debug, thiserror::Error)]
pub enum StaticWriteError {
    #[error(
        "{dir}: holds {what}, which `policy export --static` did not write: choose an empty or new folder"
    )]
    Foreign { dir: String, what: String },
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> StaticWriteError + '_ {
    move |source| StaticWriteError::Io {
        path: crate::output::escape(&path.display().to_string()).into_owned(),
        source,
    }
}

/// What DIR holds, as `/`-separated paths relative to it (folders end in `/`).
fn listing(dir: &Path) -> std::io::Result<Vec<String>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if entry.file_type()?.is_dir() {
            out.push(format!("{name}/"));
            for inner in std::fs::read_dir(entry.path())? {
                let inner = inner?;
                let kind = if inner.file_type()?.is_dir() { "/" } else { "" };
                out.push(format!(
                    "{name}/{}{kind}",
                    inner.file_name().to_string_lossy()
                ));
            }
        } else {
            out.push(name);
        }
    }
    out.sort();
    Ok(out)
}

fn is_ours(entry: &str) -> bool {
    KNOWN_FILES.contains(&entry) || entry == "policies/" || entry == "webhooks/"
}

/// Writes the files into `dir`, all or nothing. A new `dir` is written as a
/// sibling folder and renamed into place. An existing one must be empty or
/// hold only a previous export: each file is then written beside its
/// destination (a name kube-apiserver does not read) and renamed over it once
/// all are written, so a folder mounted into kube-apiserver's pod stays the
/// same folder; files of the previous export this one does not have are
/// removed last.
pub fn write(dir: &Path, files: &[File]) -> Result<(), StaticWriteError> {
    let shown = || crate::output::escape(&dir.display().to_string()).into_owned();
    match std::fs::metadata(dir) {
        Ok(m) if !m.is_dir() => Err(StaticWriteError::Foreign {
            dir: shown(),
            what: "a file, not a folder".into(),
        }),
        Ok(_) => {
            let entries = listing(dir).map_err(io(dir))?;
            if let Some(foreign) = entries.iter().find(|e| !is_ours(e)) {
                return Err(StaticWriteError::Foreign {
                    dir: shown(),
                    what: crate::output::quoted(foreign),
                });
            }
            replace_in_place(dir, files, &entries)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => write_new(dir, files),
        Err(e) => Err(io(dir)(e)),
    }
}

fn write_new(dir: &Path, files: &[File]) -> Result<(), StaticWriteError> {
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let base = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "static".into());
    let tmp = parent.join(format!(".{base}.tmp-{}", std::process::id()));
    let result = (|| {
        std::fs::create_dir(&tmp).map_err(io(&tmp))?;
        for sub in [POLICIES, WEBHOOKS] {
            if files.iter().any(|f| f.path.starts_with(&format!("{sub}/"))) {
                let p = tmp.join(sub);
                std::fs::create_dir(&p).map_err(io(&p))?;
            }
        }
        for f in files {
            let p = tmp.join(f.path);
            replace(&p, f.text.as_bytes(), Access::Everyone).map_err(io(&p))?;
        }
        std::fs::rename(&tmp, dir).map_err(io(dir))
    })();
    if result.is_err() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    result
}

fn replace_in_place(
    dir: &Path,
    files: &[File],
    entries: &[String],
) -> Result<(), StaticWriteError> {
    for sub in [POLICIES, WEBHOOKS] {
        if files.iter().any(|f| f.path.starts_with(&format!("{sub}/"))) {
            let p = dir.join(sub);
            if !p.is_dir() {
                std::fs::create_dir(&p).map_err(io(&p))?;
            }
        }
    }
    // Every file written beside its destination first (dropped, each is
    // removed), then each renamed over it: a symlink there is replaced.
    let mut written = Vec::with_capacity(files.len());
    for f in files {
        let to = dir.join(f.path);
        written.push(NewFile::write(&to, f.text.as_bytes(), Access::Everyone).map_err(io(&to))?);
    }
    for (f, new) in files.iter().zip(written) {
        let to = dir.join(f.path);
        new.commit().map_err(io(&to))?;
    }
    for stale in entries
        .iter()
        .filter(|e| KNOWN_FILES.contains(&e.as_str()) && !files.iter().any(|f| f.path == *e))
    {
        let p = dir.join(stale);
        std::fs::remove_file(&p).map_err(io(&p))?;
    }
    // A folder stays, emptied: an AdmissionConfiguration that names it
    // keeps kube-apiserver from starting without it.
    Ok(())
}

/// What a directory holds: each file's text by its relative path.
pub fn read_dir(dir: &Path) -> Result<BTreeMap<String, Result<String, String>>, std::io::Error> {
    let mut out = BTreeMap::new();
    for entry in listing(dir)? {
        if entry.ends_with('/') {
            continue;
        }
        // Regular files of a policy's size at most: a pull request may bring them.
        let text = crate::files::read_regular(&dir.join(&entry), crate::files::MAX_POLICY_BYTES)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .map_err(|e| e.to_string());
        out.insert(entry, text);
    }
    Ok(out)
}

/// Whether `found` (a directory's files, [`read_dir`]) is the export of
/// `policy` with `options`: the same files, each holding the same objects
/// field for field (comments and formatting aside). The first difference is
/// the error.
pub fn verify(
    policy: &Policy,
    options: &Options,
    found: &BTreeMap<String, Result<String, String>>,
) -> Result<(), StaticVerifyError> {
    let files = render(policy, options)?;
    for f in &files {
        let text = match found.get(f.path) {
            None => return Err(StaticVerifyError::Missing(f.path.into())),
            Some(Err(why)) => {
                return Err(StaticVerifyError::Unreadable {
                    file: f.path.into(),
                    why: why.clone(),
                });
            }
            Some(Ok(text)) => text,
        };
        let documents: Vec<serde_json::Value> = crate::yaml::documents(text, &crate::yaml::POLICY)
            .map_err(|e| StaticVerifyError::Yaml {
                file: f.path.into(),
                why: crate::output::without_values(&e.to_string()),
            })?;
        let objects: Vec<serde_json::Value> =
            documents.into_iter().filter(|v| !v.is_null()).collect();
        if objects.len() != f.objects.len() {
            return Err(StaticVerifyError::Count {
                file: f.path.into(),
                found: objects.len(),
                want: f.objects.len(),
            });
        }
        for ((kind, want), got) in f.objects.iter().zip(&objects) {
            if let Some(at) = first_difference(want, got, "", MissingKey::Escaped) {
                let name = want
                    .pointer("/metadata/name")
                    .and_then(|n| n.as_str())
                    .map(|n| format!(" {n}"))
                    .unwrap_or_default();
                return Err(StaticVerifyError::Differs {
                    file: f.path.into(),
                    object: format!("{kind}{name}"),
                    at: if at.is_empty() { "the top".into() } else { at },
                });
            }
        }
    }
    if let Some(extra) = found.keys().find(|k| !files.iter().any(|f| f.path == *k)) {
        return Err(StaticVerifyError::Extra(
            crate::output::escape(extra).into_owned(),
        ));
    }
    Ok(())
}
