//! The documentation's relative links lead somewhere: every link in
//! README.md, DEVELOPMENT.md and docs/**/*.md to a file of the repository
//! names one that exists, and a `#anchor` names a heading of that page (as
//! GitHub makes anchors from headings).

mod common;

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};

use common::repository::root;

/// The pages checked: README.md, DEVELOPMENT.md and every `.md` under docs/.
fn pages() -> Vec<PathBuf> {
    let mut out = vec![root().join("README.md"), root().join("DEVELOPMENT.md")];
    let mut folders = vec![root().join("docs")];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                folders.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// The lines of a page outside fenced code blocks.
fn prose(text: &str) -> impl Iterator<Item = &str> {
    let mut fenced = false;
    text.lines().filter(move |line| {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            return false;
        }
        !fenced
    })
}

/// A line with its inline code spans removed (a link inside backticks is
/// text, not a link).
fn without_code(line: &str) -> String {
    let mut out = String::new();
    let mut in_code = false;
    for c in line.chars() {
        if c == '`' {
            in_code = !in_code;
        } else if !in_code {
            out.push(c);
        }
    }
    out
}

/// The targets of the inline links `[text](target)` of a page.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in prose(text) {
        let line = without_code(line);
        let mut rest = line.as_str();
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            let Some(end) = rest.find(')') else { break };
            let target = rest[..end].split_whitespace().next().unwrap_or_default();
            out.push(target.to_string());
            rest = &rest[end..];
        }
    }
    out
}

/// GitHub's anchor for a heading: lowercase, everything but letters,
/// digits, spaces, `-` and `_` dropped, spaces made `-`.
fn slug(heading: &str) -> String {
    without_code(heading)
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a page's headings; a repeated one gets `-1`, `-2`, ...
fn anchors(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in prose(text) {
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if hashes == 0 || hashes > 6 || !line[hashes..].starts_with(' ') {
            continue;
        }
        // Backticks are punctuation to GitHub: `doctor --cluster` is doctor---cluster.
        let base = slug(&line[hashes..].replace('`', ""));
        let mut anchor = base.clone();
        let mut n = 0;
        while out.contains(&anchor) {
            n += 1;
            anchor = format!("{base}-{n}");
        }
        out.insert(anchor);
    }
    out
}

/// `a/b/../c` as `a/c`, without touching the file system.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// What is wrong with each relative link of `page`.
fn broken_links(page: &Path, text: &str) -> Vec<String> {
    let mut broken = Vec::new();
    for target in links(text) {
        if target.is_empty()
            || target.contains("://")
            || target.starts_with("mailto:")
            || target.starts_with('<')
        {
            continue;
        }
        let (file, anchor) = match target.split_once('#') {
            Some((file, anchor)) => (file, Some(anchor)),
            None => (target.as_str(), None),
        };
        let dest = if file.is_empty() {
            page.to_path_buf()
        } else {
            normalize(&page.parent().unwrap().join(file))
        };
        if !dest.starts_with(root()) || !dest.exists() {
            broken.push(format!("{target}: no such file"));
            continue;
        }
        let Some(anchor) = anchor else { continue };
        if dest.extension().is_none_or(|e| e != "md") {
            continue;
        }
        let dest_text = match file {
            "" => text.to_string(),
            _ => std::fs::read_to_string(&dest).unwrap(),
        };
        if !anchors(&dest_text).contains(anchor) {
            broken.push(format!("{target}: no heading with that anchor"));
        }
    }
    broken
}

#[test]
fn every_relative_link_of_the_docs_leads_to_a_file_and_heading() {
    let pages = pages();
    assert!(pages.len() >= 20, "only {} pages found", pages.len());
    let mut broken = Vec::new();
    let mut checked = 0;
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap();
        checked += links(&text).len();
        let shown = page.strip_prefix(root()).unwrap().display().to_string();
        broken.extend(
            broken_links(page, &text)
                .into_iter()
                .map(|why| format!("{shown}: {why}")),
        );
    }
    assert!(
        checked > 100,
        "only {checked} links found: are links parsed?"
    );
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn anchors_are_made_as_github_makes_them() {
    let page = "# Title\n## `doctor --cluster` at scale (`scripts/doctor-scale.sh`)\n\
                ```\n## not a heading\n```\n## Rule 1: only UPDATE is judged\n## Title\n";
    let got = anchors(page);
    for want in [
        "title",
        "doctor---cluster-at-scale-scriptsdoctor-scalesh",
        "rule-1-only-update-is-judged",
        "title-1",
    ] {
        assert!(got.contains(want), "{want} not in {got:?}");
    }
    assert!(!got.contains("not-a-heading"), "{got:?}");
}

#[test]
fn a_link_to_a_missing_file_or_heading_is_found() {
    let page = root().join("docs/policy.md");
    let text = "[ok](../README.md) [gone](nowhere.md) [bad](#no-such-heading)\n\
                `[code](nowhere.md)` [web](https://example.com/x.md)\n# Here\n[self](#here)\n";
    let broken = broken_links(&page, text);
    assert_eq!(
        broken,
        [
            "nowhere.md: no such file",
            "#no-such-heading: no heading with that anchor"
        ],
        "{broken:?}"
    );
}
