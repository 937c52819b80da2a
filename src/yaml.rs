//! Reading YAML that comes from outside: policy files (`policy validate`,
//! `test`, `serve` and its reloads, the chart's policy check, the policy
//! `doctor --cluster` and `unstick` read off a cluster), suite files,
//! `policy suggest --merge`'s policy, and the exports `policy validate
//! --vap`/`--static` compares. Every such read comes through here.
//!
//! An anchored node (`&a [...]`) is repeated wherever an alias (`*a`)
//! names it, and an anchored node may itself hold aliases: a few KiB of
//! YAML can spell out gigabytes. serde_yaml_ng bounds only how often it
//! jumps to an anchor (100 times per event of the document), not what the
//! jumps expand to. So, before serde_yaml_ng builds anything, the
//! document's events are read once by [`libyaml_safer`] (the libyaml
//! parser serde_yaml_ng runs, ported to safe Rust: both read a document
//! the same way), each anchor's expanded size is worked out as it closes,
//! and a document that would expand past its limits ([`POLICY`],
//! [`SUITE`]) is refused, naming the limit, without building it. A
//! document that does not parse is refused here too, with the parser's
//! reason, never skipped.
//!
//! What is counted, over every document of the input, each node as many
//! times as aliases repeat it: the nodes (scalars, sequences, mappings,
//! keys included), the bytes of the scalars, and the aliases themselves.

use std::collections::HashMap;

use libyaml_safer::{EventData, Mark, Parser};
use serde::de::DeserializeOwned;

/// What one YAML input may expand to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct YamlLimits {
    /// Nodes (scalars, sequences, mappings), counted once per repetition.
    pub nodes: u64,
    /// Bytes of the scalars, counted once per repetition.
    pub scalar_bytes: u64,
    /// Aliases (`*name`).
    pub aliases: u64,
}

/// A policy file, and what is compared with one (`policy validate --vap`
/// and `--static`): a policy of a thousand rules is some 20,000 nodes.
/// Built, this much takes some 20 MiB, well within the 64 MiB the chart
/// gives its policy check; as many bytes as the largest policy file read.
pub const POLICY: YamlLimits = YamlLimits {
    nodes: 100_000,
    scalar_bytes: crate::files::MAX_POLICY_BYTES,
    aliases: 10_000,
};

/// A suite file: thousands of cases, each of a few dozen nodes and an
/// object reused by alias (5,000 cases reusing an object of 150 nodes
/// are some 900,000). Built, this much takes about 50 MiB.
pub const SUITE: YamlLimits = YamlLimits {
    nodes: 1_000_000,
    scalar_bytes: 32 * 1024 * 1024,
    aliases: 100_000,
};

/// What an input expands to, as [`scan`] counted it.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Expanded {
    pub nodes: u64,
    pub scalar_bytes: u64,
    pub aliases: u64,
}

/// Why an input was not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// Not YAML: the parser's reason and where, as serde_yaml_ng says it.
    #[error("{0}")]
    Syntax(String),
    /// `*name` before any `&name`.
    #[error("unknown anchor at {at}")]
    UnknownAnchor { at: String },
    /// `*name` inside the node `&name` anchors: it would repeat without end.
    #[error("an alias inside the node its anchor names, at {at}: it would repeat without end")]
    Recursive { at: String },
    #[error(
        "expands to more than {limit} nodes by {at} (an alias counts as all of the node it repeats); a YAML document may expand to at most {limit} nodes"
    )]
    Nodes { limit: u64, at: String },
    #[error(
        "expands to more than {limit} bytes of scalars by {at} (an alias counts as all of the node it repeats); a YAML document may expand to at most {limit} bytes of scalars"
    )]
    ScalarBytes { limit: u64, at: String },
    #[error("holds more than {limit} aliases by {at}; a YAML document may hold at most {limit}")]
    Aliases { limit: u64, at: String },
    #[error(
        "nests `[` and `{{` more than {limit} deep by byte {at}; a YAML document may nest at most {limit} deep (and is read at most 128 deep)"
    )]
    FlowDepth { limit: usize, at: usize },
}

/// How deep `[` and `{` may nest in the text before it is parsed at all:
/// the parser reads a flow collection's tokens ahead of its first event,
/// in time that grows with the square of the nesting, and what is built
/// from it is read at most 128 deep anyway. Counted on the bytes, quotes
/// and comments included: a document holding this many unclosed brackets
/// in its strings is refused too, which no policy or suite needs.
const MAX_FLOW_DEPTH: usize = 256;

/// `input`'s brackets nest at most [`MAX_FLOW_DEPTH`] deep.
fn flow_depth(input: &[u8]) -> Result<(), Refused> {
    let mut depth = 0usize;
    for (at, byte) in input.iter().enumerate() {
        match byte {
            b'[' | b'{' => {
                depth += 1;
                if depth > MAX_FLOW_DEPTH {
                    return Err(Refused::FlowDepth {
                        limit: MAX_FLOW_DEPTH,
                        at,
                    });
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

/// Why YAML could not be read: refused before it was built ([`scan`]), or
/// not of the shape wanted.
#[derive(Debug, thiserror::Error)]
pub enum YamlError {
    #[error(transparent)]
    Refused(#[from] Refused),
    #[error(transparent)]
    Parse(#[from] serde_yaml_ng::Error),
}

/// `serde_yaml_ng::from_str`, once [`scan`] has found `text` within `limits`.
pub fn from_str<T: DeserializeOwned>(text: &str, limits: &YamlLimits) -> Result<T, YamlError> {
    scan(text.as_bytes(), limits)?;
    Ok(serde_yaml_ng::from_str(text)?)
}

/// `serde_yaml_ng::from_slice`, once [`scan`] has found `bytes` within `limits`.
pub fn from_slice<T: DeserializeOwned>(bytes: &[u8], limits: &YamlLimits) -> Result<T, YamlError> {
    scan(bytes, limits)?;
    Ok(serde_yaml_ng::from_slice(bytes)?)
}

/// Each document of `text` (`---` between them), once [`scan`] has found
/// the whole of it within `limits`.
pub fn documents<T: DeserializeOwned>(
    text: &str,
    limits: &YamlLimits,
) -> Result<Vec<T>, YamlError> {
    scan(text.as_bytes(), limits)?;
    let mut out = Vec::new();
    for document in serde_yaml_ng::Deserializer::from_str(text) {
        out.push(T::deserialize(document)?);
    }
    Ok(out)
}

/// The size of a node as expanded.
#[derive(Debug, Default, Clone, Copy)]
struct Size {
    nodes: u64,
    bytes: u64,
}

impl Size {
    fn add(&mut self, other: Size) {
        self.nodes = self.nodes.saturating_add(other.nodes);
        self.bytes = self.bytes.saturating_add(other.bytes);
    }
}

/// A sequence or mapping not yet closed.
struct Open {
    /// Its anchor's index in `Scan::anchors`, if it has one.
    anchor: Option<usize>,
    /// What it holds so far, itself included.
    size: Size,
}

/// The state of one [`scan`].
struct Scan<'l> {
    limits: &'l YamlLimits,
    counted: Expanded,
    /// Each anchor of the current document by name: the latest one so
    /// named, as an alias refers to it (an index into `anchors`).
    names: HashMap<String, usize>,
    /// Each anchored node's expanded size; `None` while it is still open.
    anchors: Vec<Option<Size>>,
    open: Vec<Open>,
}

impl Scan<'_> {
    /// A scalar or an alias of `size` found at `mark`: counted, and added
    /// to the node holding it.
    fn node(&mut self, size: Size, mark: Mark) -> Result<(), Refused> {
        self.count(size, mark)?;
        if let Some(parent) = self.open.last_mut() {
            parent.size.add(size);
        }
        Ok(())
    }

    /// `size` more of the input, found at `mark`, within the limits.
    fn count(&mut self, size: Size, mark: Mark) -> Result<(), Refused> {
        self.counted.nodes = self.counted.nodes.saturating_add(size.nodes);
        self.counted.scalar_bytes = self.counted.scalar_bytes.saturating_add(size.bytes);
        if self.counted.nodes > self.limits.nodes {
            return Err(Refused::Nodes {
                limit: self.limits.nodes,
                at: at(mark),
            });
        }
        if self.counted.scalar_bytes > self.limits.scalar_bytes {
            return Err(Refused::ScalarBytes {
                limit: self.limits.scalar_bytes,
                at: at(mark),
            });
        }
        Ok(())
    }

    /// `&name` on a node: aliases after this refer to it.
    fn anchor(&mut self, name: String, size: Option<Size>) -> usize {
        let index = self.anchors.len();
        self.anchors.push(size);
        self.names.insert(name, index);
        index
    }

    fn alias(&mut self, name: &str, mark: Mark) -> Result<(), Refused> {
        self.counted.aliases += 1;
        if self.counted.aliases > self.limits.aliases {
            return Err(Refused::Aliases {
                limit: self.limits.aliases,
                at: at(mark),
            });
        }
        let Some(&index) = self.names.get(name) else {
            return Err(Refused::UnknownAnchor { at: at(mark) });
        };
        let Some(size) = self.anchors[index] else {
            return Err(Refused::Recursive { at: at(mark) });
        };
        self.node(size, mark)
    }
}

/// Reads `input`'s events, without building anything from them, and
/// counts what its documents expand to: refused past `limits`, or if it is
/// not YAML.
pub fn scan(input: &[u8], limits: &YamlLimits) -> Result<Expanded, Refused> {
    flow_depth(input)?;
    let mut parser = Parser::new();
    parser.set_input(input);
    let mut scan = Scan {
        limits,
        counted: Expanded::default(),
        names: HashMap::new(),
        anchors: Vec::new(),
        open: Vec::new(),
    };
    loop {
        let event = parser.parse().map_err(|e| Refused::Syntax(syntax(&e)))?;
        let mark = event.start_mark;
        match event.data {
            EventData::StreamEnd => return Ok(scan.counted),
            EventData::StreamStart { .. } | EventData::DocumentEnd { .. } => {}
            // Anchors are the document's own.
            EventData::DocumentStart { .. } => {
                scan.names.clear();
                scan.anchors.clear();
            }
            EventData::Alias { anchor } => scan.alias(&anchor, mark)?,
            EventData::Scalar { anchor, value, .. } => {
                let size = Size {
                    nodes: 1,
                    bytes: value.len() as u64,
                };
                if let Some(name) = anchor {
                    scan.anchor(name, Some(size));
                }
                scan.node(size, mark)?;
            }
            EventData::SequenceStart { anchor, .. } | EventData::MappingStart { anchor, .. } => {
                let anchor = anchor.map(|name| scan.anchor(name, None));
                // Counted where it opens, and what it holds as it comes;
                // its parent learns its size when it closes.
                let itself = Size { nodes: 1, bytes: 0 };
                scan.count(itself, mark)?;
                scan.open.push(Open {
                    anchor,
                    size: itself,
                });
            }
            EventData::SequenceEnd | EventData::MappingEnd => {
                let Some(closed) = scan.open.pop() else {
                    return Err(Refused::Syntax(format!("unbalanced YAML at {}", at(mark))));
                };
                if let Some(index) = closed.anchor {
                    scan.anchors[index] = Some(closed.size);
                }
                if let Some(parent) = scan.open.last_mut() {
                    parent.size.add(closed.size);
                }
            }
        }
    }
}

/// A parser error as serde_yaml_ng words the same error of libyaml's:
/// `PROBLEM at line L column C, CONTEXT at line L column C`, each place
/// said when known and, for the context, when not the problem's.
fn syntax(e: &libyaml_safer::Error) -> String {
    let known = |mark: &Mark| (mark.line, mark.column) != (0, 0);
    let mut out = e.problem().to_string();
    let problem = e.problem_mark().filter(known);
    if let Some(mark) = problem {
        out.push_str(&format!(" at {}", at(mark)));
    }
    if let Some(context) = e.context() {
        out.push_str(&format!(", {context}"));
        if let Some(mark) = e.context_mark().filter(known)
            && problem.is_none_or(|p| (p.line, p.column) != (mark.line, mark.column))
        {
            out.push_str(&format!(" at {}", at(mark)));
        }
    }
    out
}

/// Where in the input: `line L column C`, as serde_yaml_ng says it.
fn at(mark: Mark) -> String {
    format!("line {} column {}", mark.line + 1, mark.column + 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn counted(text: &str) -> Expanded {
        scan(text.as_bytes(), &SUITE).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    fn refused(text: &str, limits: &YamlLimits) -> Refused {
        scan(text.as_bytes(), limits).expect_err(text)
    }

    #[test]
    fn an_alias_counts_the_whole_node_it_repeats() {
        // The mapping, 3 keys, the list and its 3 items, then 4 nodes and
        // 3 bytes for each alias.
        let text = "a: &x [1, 2, 3]\nb: *x\nc: *x\n";
        assert_eq!(
            counted(text),
            Expanded {
                nodes: 1 + 3 + 4 + 4 + 4,
                scalar_bytes: 3 + 3 + 3 + 3,
                aliases: 2
            }
        );
        // Nested: an anchored node holding aliases is as large as what they expand to.
        let text = "a: &x [1, 2]\nb: &y [*x, *x, *x]\nc: [*y, *y]\n";
        let y = 1 + 3 * 3;
        assert_eq!(counted(text).nodes, 1 + 3 + 3 + y + 1 + 2 * y);
        assert_eq!(counted(text).aliases, 3 + 2);
        // A scalar anchor, and a key that is an alias.
        assert_eq!(
            counted("? &k key\n: v\n*k : w\n"),
            Expanded {
                nodes: 5,
                scalar_bytes: 3 + 1 + 3 + 1,
                aliases: 1
            }
        );
        // Anchors are each document's own; the last of a name is the one named.
        assert_eq!(
            counted("a: &x [1]\nb: &x 2\nc: *x\n").nodes,
            1 + 3 + 2 + 1 + 1
        );
        assert!(matches!(
            refused("a: &x 1\n---\nb: *x\n", &SUITE),
            Refused::UnknownAnchor { .. }
        ));
    }

    /// The alias bomb of the review: one anchored list, repeated by alias
    /// thousands of times. 20 KB of it built whole took over 800 MB; here
    /// it is refused while counting, having built nothing.
    #[test]
    fn an_alias_bomb_is_refused_naming_the_limit() {
        let list = format!("[{}]", vec!["x"; 4000].join(","));
        let text = format!("presets: [&a {list}, {}]\n", vec!["*a"; 4000].join(","));
        assert!(text.len() < 21_000, "{}", text.len());
        let e = refused(&text, &SUITE);
        assert!(
            matches!(
                e,
                Refused::Nodes {
                    limit: 1_000_000,
                    ..
                }
            ),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            "expands to more than 1000000 nodes by line 1 column 8761 (an alias counts as all of the node it repeats); a YAML document may expand to at most 1000000 nodes"
        );
        // A policy's limits are tighter: it is a few hundred nodes.
        let e = refused(&text, &POLICY);
        assert!(matches!(e, Refused::Nodes { limit: 100_000, .. }), "{e:?}");
        // Through every reader: the same refusal, not a built value.
        let e = from_str::<serde_yaml_ng::Value>(&text, &SUITE).unwrap_err();
        assert!(
            matches!(e, YamlError::Refused(Refused::Nodes { .. })),
            "{e}"
        );
        let e = documents::<Value>(&text, &SUITE).unwrap_err();
        assert!(
            matches!(e, YamlError::Refused(Refused::Nodes { .. })),
            "{e}"
        );

        // The scalars' bytes, and the aliases, have limits of their own.
        let small = YamlLimits {
            nodes: 1_000_000,
            scalar_bytes: 10_000,
            aliases: 100,
        };
        let text = format!("- &a {}\n{}", "x".repeat(1000), "- *a\n".repeat(10));
        let e = refused(&text, &small);
        assert!(
            matches!(e, Refused::ScalarBytes { limit: 10_000, .. }),
            "{e:?}"
        );
        assert!(
            e.to_string().contains("at most 10000 bytes of scalars"),
            "{e}"
        );
        let e = refused(&format!("- &a x\n{}", "- *a\n".repeat(101)), &small);
        assert!(matches!(e, Refused::Aliases { limit: 100, .. }), "{e:?}");
        assert_eq!(
            e.to_string(),
            "holds more than 100 aliases by line 102 column 3; a YAML document may hold at most 100"
        );
        // Nested anchors, each repeating the last ten times: 10^9 nodes
        // from a few hundred bytes, and serde_yaml_ng's own guard (100
        // jumps per event) would let it jump thousands of times.
        let mut text = String::from("- &l0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..9 {
            text.push_str(&format!(
                "- &l{i} [{}]\n",
                vec![format!("*l{}", i - 1); 10].join(", ")
            ));
        }
        assert!(matches!(refused(&text, &SUITE), Refused::Nodes { .. }));
    }

    #[test]
    fn flow_collections_nested_past_the_limit_are_refused_before_parsing() {
        let deep = |n: usize| format!("x: {}{}\n", "[".repeat(n), "]".repeat(n));
        assert_eq!(
            scan(deep(90_000).as_bytes(), &SUITE),
            Err(Refused::FlowDepth {
                limit: MAX_FLOW_DEPTH,
                at: 3 + MAX_FLOW_DEPTH
            })
        );
        let mappings = format!("{}{}", "{a: ".repeat(60_000), "}".repeat(60_000));
        assert!(matches!(
            scan(mappings.as_bytes(), &POLICY),
            Err(Refused::FlowDepth { .. })
        ));
        // Side by side, however many, they nest no deeper.
        let wide = format!("x: [{}]\n", "[], ".repeat(10_000));
        assert!(scan(wide.as_bytes(), &SUITE).is_ok());
        assert!(scan(deep(100).as_bytes(), &SUITE).is_ok());
    }

    #[test]
    fn a_node_that_holds_an_alias_to_itself_is_refused() {
        for text in ["a: &x [1, *x]\n", "&x {a: {b: *x}}\n"] {
            let e = refused(text, &SUITE);
            assert!(matches!(e, Refused::Recursive { .. }), "{text}: {e:?}");
            assert!(from_str::<serde_yaml_ng::Value>(text, &SUITE).is_err());
        }
        // Once closed, it may be repeated.
        assert_eq!(counted("- &x [1]\n- [*x, *x]\n").aliases, 2);
    }

    /// Anchors used as a suite uses them, an object reused case after case,
    /// read as if written out.
    #[test]
    fn reused_anchors_read_as_if_written_out() {
        let object = "{kind: Pod, name: web-0, namespace: shop, finalizers: [example.com/a]}";
        let mut aliased = format!("cases:\n  - object: &o {object}\n    expect: denied\n");
        let mut written = format!("cases:\n  - object: {object}\n    expect: denied\n");
        for _ in 0..5000 {
            aliased.push_str("  - object: *o\n    expect: denied\n");
            written.push_str(&format!("  - object: {object}\n    expect: denied\n"));
        }
        let a: Value = from_str(&aliased, &SUITE).unwrap();
        let w: Value = from_str(&written, &SUITE).unwrap();
        assert_eq!(a, w);
        assert_eq!(
            a["cases"][5000]["object"]["finalizers"],
            json!(["example.com/a"])
        );
        assert_eq!(counted(&aliased).nodes, counted(&written).nodes);
        assert_eq!(counted(&aliased).aliases, 5000);
    }

    /// A document that does not parse is refused with what serde_yaml_ng
    /// would have said, word for word: the same parser read it.
    #[test]
    fn what_does_not_parse_is_refused_as_serde_yaml_ng_says_it() {
        for text in [
            "a: b: c\n",
            "a: [1, 2\n",
            "- a\nb: c\n",
            "a:\n  - b\n c: d\n",
            "key: \"unterminated\n",
            "a: *\n",
            "a: &x\n  b: 1\n c: 2\n",
            "{a: 1}}\n",
            "a: 'x\n\n",
            "\t- tab\n",
            "%YAML 2.0\n---\na: 1\n",
            "a: !<tag\n",
            "---\na: 1\n...\n---\n- [\n",
        ] {
            let Refused::Syntax(ours) = refused(text, &SUITE) else {
                panic!("{text:?}: not refused as syntax");
            };
            let theirs = serde_yaml_ng::Deserializer::from_str(text)
                .map(<serde_yaml_ng::Value as serde::Deserialize>::deserialize)
                .find_map(Result::err)
                .unwrap_or_else(|| panic!("{text:?}: serde_yaml_ng read it"));
            assert_eq!(ours, theirs.to_string(), "{text:?}");
        }
    }

    /// Every YAML file of the repository (policies, suites, the chart, the
    /// manifests) reads the same with the check as without it: whatever
    /// the check refuses, serde_yaml_ng refuses too.
    #[test]
    fn the_repository_s_yaml_reads_as_it_did() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut seen = 0;
        let mut stack = vec![root.to_path_buf()];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                let name = path.file_name().unwrap().to_string_lossy().into_owned();
                if path.is_dir() {
                    if !name.starts_with('.') && name != "target" {
                        stack.push(path);
                    }
                    continue;
                }
                if !(name.ends_with(".yaml") || name.ends_with(".yml")) {
                    continue;
                }
                let text = std::fs::read_to_string(&path).unwrap();
                let theirs: Result<Vec<serde_yaml_ng::Value>, String> =
                    serde_yaml_ng::Deserializer::from_str(&text)
                        .map(|d| {
                            serde::Deserialize::deserialize(d)
                                .map_err(|e: serde_yaml_ng::Error| e.to_string())
                        })
                        .collect();
                match (scan(text.as_bytes(), &SUITE), theirs) {
                    (Ok(_), _) => {}
                    (Err(Refused::Syntax(ours)), Err(theirs)) => {
                        assert_eq!(ours, theirs, "{}", path.display())
                    }
                    (Err(e), theirs) => {
                        panic!("{}: {e}; serde_yaml_ng: {theirs:?}", path.display())
                    }
                }
                seen += 1;
            }
        }
        assert!(seen >= 40, "{seen}");
    }
}
