//! The layers of `src/` hold (DEVELOPMENT.md, "Layout"). Every `use
//! crate::…`, `use super::…` and qualified `crate::a::b` path of the
//! production code (`#[cfg(test)]` items left out) is read as one file
//! importing another, through the re-exports of a folder's `mod.rs` to the
//! file that defines what is named. Each file stands on its module's floor
//! ([`FLOORS`]), and the test fails, naming the file and line, on
//!
//! - an import from a lower floor of a higher one (inside a folder whose
//!   files are stacked, [`STACKED`], of a file higher in its order);
//! - a step sideways, between two modules of one floor, that [`SIDEWAYS`]
//!   does not list with its reason;
//! - a circle of files importing each other, anywhere;
//! - an entry of [`SIDEWAYS`] or [`TO_REMOVE`] that no import needs any more.
//!
//! [`TO_REMOVE`] lists the imports that break these rules today, each to be
//! taken away. `cargo test --test layers picture -- --nocapture` prints the
//! picture: what each floor imports of the floors below, and the steps
//! sideways.
//!
//! The files are read as text, without a parser: comments, strings and
//! characters are set aside first, so a path inside them is not an import.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt::Write as _;
use std::path::Path;

/// The floors of `src/`, bottom to top, each with its top-level modules
/// (`lib` is `lib.rs`, `main` is `main.rs`). A module may import from its
/// own module and from the floors below.
const FLOORS: &[(&str, &[&str])] = &[
    // Below everything: they import nothing of the crate but each other.
    ("ground", &["files", "output", "queue", "version", "yaml"]),
    ("policy", &["policy"]),
    // The one error type names the policy's errors; the shared flags check
    // names as the policy does.
    ("errors and flags", &["error", "flags"]),
    ("admission", &["admission"]),
    ("trail", &["trail"]),
    // What `serve` and the offline commands (`certs`, `check`) both make and read.
    ("certificates and keys", &["pki"]),
    // Neither needs the other: what both use (TLS, certificates) is below.
    ("server and offline", &["server", "offline"]),
    // `watch` stops on the server's signal and serves its admin port.
    ("cluster", &["cluster"]),
    ("command line", &["cli"]),
    ("top", &["lib", "main"]),
];

/// Folders whose files are stacked, bottom to top: a file imports only
/// those below it (the folder's `mod.rs`, the front door, is above them
/// all). The order is the one the folder's `mod.rs` gives.
const STACKED: &[(&str, &[&str])] = &[(
    "policy",
    &[
        "field",
        "text",
        "kinds",
        "builtin",
        "breadth",
        "config",
        "invalid",
        "presets",
        "schema",
        "load",
        "seal",
        "change",
        "overrides",
        "approval",
        "decision",
        "message",
        "decide",
        "lint",
        "servable",
    ],
)];

/// One import the rules allow as an exception: from a module (or a file's
/// module path, `offline::check`) to another, and why.
struct Step {
    from: &'static str,
    to: &'static str,
    why: &'static str,
}

/// Steps sideways between two modules of one floor that belong there.
const SIDEWAYS: &[Step] = &[
    Step {
        from: "yaml",
        to: "files",
        why: "YAML from outside is read through the bounded file reads",
    },
    Step {
        from: "version",
        to: "output",
        why: "`version` prints through the one `-o text|json` printer",
    },
];

/// Imports that still break the rules, each with what takes it away: an
/// entry no import needs any more fails the test.
const TO_REMOVE: &[Step] = &[];

/// The rules one check applies.
struct Rules<'a> {
    floors: &'a [(&'a str, &'a [&'a str])],
    stacked: &'a [(&'a str, &'a [&'a str])],
    sideways: &'a [Step],
    to_remove: &'a [Step],
}

const RULES: Rules<'static> = Rules {
    floors: FLOORS,
    stacked: STACKED,
    sideways: SIDEWAYS,
    to_remove: TO_REMOVE,
};

#[test]
fn src_keeps_its_layers() {
    let graph = check(&read_src(), &RULES);
    assert!(
        graph.files.len() > 50 && graph.edges.len() > 200,
        "read {} files and {} imports: is src/ read at all?",
        graph.files.len(),
        graph.edges.len()
    );
    assert!(
        graph.problems.is_empty(),
        "{} import(s) break the layers of src/ (the rules: tests/layers.rs; DEVELOPMENT.md, \"Layout\"):\n{}",
        graph.problems.len(),
        graph.problems.join("\n")
    );
}

/// The picture of the imports, with `-- --nocapture`.
#[test]
fn picture() {
    println!("{}", picture_of(&check(&read_src(), &RULES), &RULES));
}

/// The order of [`STACKED`] is the one `policy/mod.rs` says.
#[test]
fn the_policy_order_is_the_one_its_mod_rs_says() {
    let text = std::fs::read_to_string(root().join("src/policy/mod.rs")).unwrap();
    let said: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.contains("The files, bottom to top"))
        .skip(1)
        .take_while(|l| l.starts_with("//!") && l.trim() != "//!")
        .flat_map(|l| l.split('`').skip(1).step_by(2))
        .collect();
    let ours = STACKED
        .iter()
        .find(|(folder, _)| *folder == "policy")
        .unwrap()
        .1;
    assert_eq!(
        said, ours,
        "src/policy/mod.rs and tests/layers.rs's STACKED"
    );
}

#[test]
fn a_planted_upward_import_is_caught() {
    let rules = Rules {
        floors: &[("bottom", &["low"]), ("top", &["high", "lib"])],
        stacked: &[],
        sideways: &[],
        to_remove: &[],
    };
    let files = [
        ("src/lib.rs", "pub mod high;\npub mod low;\n"),
        ("src/high.rs", "use crate::low::Base;\npub struct Top;\n"),
        (
            "src/low.rs",
            "pub struct Base;\n\nfn f() {\n    crate::high::top();\n}\n",
        ),
    ];
    let problems = check(&owned(&files), &rules).problems;
    assert!(
        problems
            .iter()
            .any(|p| p.starts_with("src/low.rs:4: upward") && p.contains("src/high.rs")),
        "{problems:#?}"
    );
    // And it is a circle, low.rs and high.rs importing each other.
    assert!(
        problems
            .iter()
            .any(|p| p.starts_with("a circle") && p.contains("src/low.rs:4")),
        "{problems:#?}"
    );
    assert_eq!(problems.len(), 2, "{problems:#?}");

    // Allowed as an exception to remove, neither is left.
    let rules = Rules {
        to_remove: &[Step {
            from: "low",
            to: "high",
            why: "planted",
        }],
        ..rules
    };
    assert_eq!(check(&owned(&files), &rules).problems, Vec::<String>::new());
}

#[test]
fn what_is_no_import_is_not_read_as_one() {
    let rules = Rules {
        floors: &[("bottom", &["low"]), ("top", &["high", "lib"])],
        stacked: &[],
        sideways: &[],
        to_remove: &[],
    };
    let files = [
        ("src/lib.rs", "pub mod high;\npub mod low;\n"),
        ("src/high.rs", "pub struct Top;\n"),
        (
            "src/low.rs",
            r####"//! Says [`crate::high::Top`] in its documentation.
pub struct Base;
// use crate::high::Top;
/* use crate::high::Top; /* nested */ crate::high::top() */
const A: &str = "use crate::high::Top; \" crate::high::top()";
const B: &str = r#"crate::high::top() "# ;
const C: char = '"';
fn life<'a>(s: &'a str) -> &'a str { s }
#[cfg(test)]
mod tests {
    use crate::high::Top;
    fn f() { let _ = "}"; crate::high::top(); }
}
#[cfg(all(test, unix))]
fn only_tested() { crate::high::top(); }
#[cfg(test)]
use crate::high::{Top as T};
"####,
        ),
    ];
    let graph = check(&owned(&files), &rules);
    assert_eq!(graph.problems, Vec::<String>::new());
    assert!(graph.edges.is_empty());
}

#[test]
fn a_sideways_step_needs_its_reason_and_a_reason_its_step() {
    let files = [
        ("src/lib.rs", "pub mod a;\npub mod b;\npub mod c;\n"),
        ("src/a.rs", "use super::b::B;\npub struct A;\n"),
        ("src/b.rs", "pub struct B;\n"),
        ("src/c.rs", "pub struct C;\n"),
    ];
    let floors: &[(&str, &[&str])] = &[("one", &["a", "b", "c"]), ("top", &["lib"])];
    let rules = Rules {
        floors,
        stacked: &[],
        sideways: &[],
        to_remove: &[],
    };
    let problems = check(&owned(&files), &rules).problems;
    assert_eq!(problems.len(), 1, "{problems:#?}");
    assert!(
        problems[0].starts_with("src/a.rs:1: sideways"),
        "{problems:#?}"
    );

    let sideways = [
        Step {
            from: "a",
            to: "b",
            why: "a needs b",
        },
        Step {
            from: "c",
            to: "b",
            why: "c once needed b",
        },
    ];
    let rules = Rules {
        sideways: &sideways,
        ..rules
    };
    let problems = check(&owned(&files), &rules).problems;
    assert_eq!(problems.len(), 1, "{problems:#?}");
    assert!(
        problems[0].contains("c -> b") && problems[0].contains("no import"),
        "{problems:#?}"
    );
}

#[test]
fn a_circle_through_a_front_door_is_found_where_it_is() {
    // `a/x.rs` names `Y` through the folder's front door; `Y` is `a/y.rs`'s,
    // which imports `a/x.rs`: a circle of two files, the front door aside.
    let files = [
        ("src/lib.rs", "pub mod a;\n"),
        (
            "src/a/mod.rs",
            "mod x;\nmod y;\npub use x::X;\npub use y::*;\n",
        ),
        ("src/a/x.rs", "use super::Y;\npub struct X;\n"),
        ("src/a/y.rs", "use super::x::X;\n\npub struct Y;\n"),
    ];
    let rules = Rules {
        floors: &[("one", &["a"]), ("top", &["lib"])],
        stacked: &[],
        sideways: &[],
        to_remove: &[],
    };
    let graph = check(&owned(&files), &rules);
    assert_eq!(graph.problems.len(), 1, "{:#?}", graph.problems);
    let circle = &graph.problems[0];
    assert!(
        circle.starts_with("a circle of files")
            && circle.contains("src/a/x.rs:1")
            && circle.contains("src/a/y.rs:1")
            && !circle.contains("mod.rs"),
        "{circle}"
    );
}

#[test]
fn a_stacked_folder_is_held_to_its_order() {
    let files = [
        ("src/lib.rs", "pub mod p;\n"),
        ("src/p/mod.rs", "mod one;\nmod two;\npub use two::Two;\n"),
        (
            "src/p/one.rs",
            "pub struct One;\nfn f() -> super::Two { todo!() }\n",
        ),
        ("src/p/two.rs", "pub struct Two;\n"),
    ];
    let rules = Rules {
        floors: &[("p", &["p"]), ("top", &["lib"])],
        stacked: &[("p", &["one", "two"])],
        sideways: &[],
        to_remove: &[],
    };
    let problems = check(&owned(&files), &rules).problems;
    assert_eq!(problems.len(), 1, "{problems:#?}");
    assert!(
        problems[0].starts_with("src/p/one.rs:2: upward") && problems[0].contains("src/p/two.rs"),
        "{problems:#?}"
    );
}

// ---------------------------------------------------------------------------
// Reading src/.

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Every `.rs` file under `src/`: its path from the crate's root, and its text.
fn read_src() -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut folders = vec![root().join("src")];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                folders.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let name = path
                    .strip_prefix(root())
                    .unwrap()
                    .to_string_lossy()
                    .replace('\\', "/");
                out.push((name, std::fs::read_to_string(&path).unwrap()));
            }
        }
    }
    out.sort();
    out
}

fn owned(files: &[(&str, &str)]) -> Vec<(String, String)> {
    files
        .iter()
        .map(|(p, t)| (p.to_string(), t.to_string()))
        .collect()
}

// ---------------------------------------------------------------------------
// Tokens: identifiers, `::` and single characters, with their lines; no
// comments, strings, characters or numbers.

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    /// `::`
    Sep,
    Punct(char),
    /// A literal: a number, a string, a character.
    Literal,
}

#[derive(Debug, Clone)]
struct Token {
    tok: Tok,
    line: usize,
}

impl Token {
    fn is(&self, c: char) -> bool {
        self.tok == Tok::Punct(c)
    }

    fn ident(&self) -> Option<&str> {
        match &self.tok {
            Tok::Ident(s) => Some(s),
            _ => None,
        }
    }
}

fn tokens(text: &str) -> Vec<Token> {
    let s: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut line = 1;
    let mut i = 0;
    let at = |i: usize| s.get(i).copied().unwrap_or('\0');
    // Skips a string whose opening quote is at `i`, `hashes` `#` after its
    // closing one (a raw string), or with escapes; returns past its end.
    let skip_string = |mut i: usize, raw: Option<usize>, line: &mut usize| -> usize {
        i += 1;
        while i < s.len() {
            match s[i] {
                '\n' => *line += 1,
                '\\' if raw.is_none() => {
                    if at(i + 1) == '\n' {
                        *line += 1;
                    }
                    i += 1;
                }
                '"' => match raw {
                    None => return i + 1,
                    Some(n) if (1..=n).all(|k| at(i + k) == '#') => return i + 1 + n,
                    Some(_) => {}
                },
                _ => {}
            }
            i += 1;
        }
        i
    };
    while i < s.len() {
        let c = s[i];
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c == '/' && at(i + 1) == '/' {
            while i < s.len() && s[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            while i < s.len() {
                if s[i] == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if s[i] == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if s[i] == '\n' {
                        line += 1;
                    }
                    i += 1;
                }
            }
        } else if c == '"' {
            let start = line;
            i = skip_string(i, None, &mut line);
            out.push(Token {
                tok: Tok::Literal,
                line: start,
            });
        } else if c == '\'' {
            // A character ('x', '\n', '\u{1F600}'), or a lifetime or label.
            let end = if at(i + 1) == '\\' {
                let mut j = i + 2;
                while j < s.len() && s[j] != '\'' && s[j] != '\n' {
                    j += 1;
                }
                Some(j + 1)
            } else if at(i + 2) == '\'' {
                Some(i + 3)
            } else {
                None
            };
            match end {
                Some(end) => {
                    out.push(Token {
                        tok: Tok::Literal,
                        line,
                    });
                    i = end;
                }
                None => {
                    out.push(Token {
                        tok: Tok::Punct('\''),
                        line,
                    });
                    i += 1;
                }
            }
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < s.len() && (s[i].is_alphanumeric() || s[i] == '_') {
                i += 1;
            }
            let word: String = s[start..i].iter().collect();
            let prefix = matches!(word.as_str(), "r" | "b" | "br" | "c" | "cr");
            if prefix && at(i) == '"' {
                let raw = word.ends_with('r').then_some(0);
                let start = line;
                i = skip_string(i, raw, &mut line);
                out.push(Token {
                    tok: Tok::Literal,
                    line: start,
                });
            } else if prefix && word.ends_with('r') && at(i) == '#' {
                let mut n = 0;
                while at(i + n) == '#' {
                    n += 1;
                }
                if at(i + n) == '"' {
                    let start = line;
                    i = skip_string(i + n, Some(n), &mut line);
                    out.push(Token {
                        tok: Tok::Literal,
                        line: start,
                    });
                } else {
                    // A raw identifier, `r#type`.
                    i += 1;
                    let start = i;
                    while i < s.len() && (s[i].is_alphanumeric() || s[i] == '_') {
                        i += 1;
                    }
                    out.push(Token {
                        tok: Tok::Ident(s[start..i].iter().collect()),
                        line,
                    });
                }
            } else if word == "b" && at(i) == '\'' {
                let mut j = i + 1;
                if at(j) == '\\' {
                    j += 1;
                }
                j += 1;
                while j < s.len() && s[j] != '\'' {
                    j += 1;
                }
                i = j + 1;
                out.push(Token {
                    tok: Tok::Literal,
                    line,
                });
            } else {
                out.push(Token {
                    tok: Tok::Ident(word),
                    line,
                });
            }
        } else if c.is_ascii_digit() {
            while i < s.len() && (s[i].is_alphanumeric() || s[i] == '_') {
                i += 1;
            }
            out.push(Token {
                tok: Tok::Literal,
                line,
            });
        } else if c == ':' && at(i + 1) == ':' {
            out.push(Token {
                tok: Tok::Sep,
                line,
            });
            i += 2;
        } else {
            out.push(Token {
                tok: Tok::Punct(c),
                line,
            });
            i += 1;
        }
    }
    out
}

/// The index past the group opened at `open` (`(`, `[` or `{`), counting
/// every kind of bracket.
fn past_group(toks: &[Token], open: usize) -> usize {
    let mut depth = 0usize;
    for (i, t) in toks.iter().enumerate().skip(open) {
        match t.tok {
            Tok::Punct('(' | '[' | '{') => depth += 1,
            Tok::Punct(')' | ']' | '}') => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
    }
    toks.len()
}

/// The tokens without the items under a `#[cfg(…test…)]` attribute (but
/// `not(test)`): tests, their helpers and their imports.
fn without_tests(toks: Vec<Token>) -> Vec<Token> {
    let mut out = Vec::with_capacity(toks.len());
    let mut i = 0;
    while i < toks.len() {
        if !(toks[i].is('#') && toks.get(i + 1).is_some_and(|t| t.is('['))) {
            out.push(toks[i].clone());
            i += 1;
            continue;
        }
        let end = past_group(&toks, i + 1);
        let inside = &toks[i + 2..end.saturating_sub(1).max(i + 2)];
        let is = |w: &str| inside.iter().any(|t| t.ident() == Some(w));
        let tested =
            inside.first().and_then(Token::ident) == Some("cfg") && is("test") && !is("not");
        if !tested {
            out.extend_from_slice(&toks[i..end]);
            i = end;
            continue;
        }
        // Past the item's other attributes, then the item: to its `;` or
        // past its `{ … }`, whichever ends it first.
        let mut j = end;
        while toks.get(j).is_some_and(|t| t.is('#')) && toks.get(j + 1).is_some_and(|t| t.is('[')) {
            j = past_group(&toks, j + 1);
        }
        while j < toks.len() {
            match toks[j].tok {
                Tok::Punct(';') => {
                    j += 1;
                    break;
                }
                Tok::Punct('{') => {
                    j = past_group(&toks, j);
                    if toks.get(j).is_some_and(|t| t.is(';')) {
                        j += 1;
                    }
                    break;
                }
                Tok::Punct('(' | '[') => j = past_group(&toks, j),
                _ => j += 1,
            }
        }
        i = j;
    }
    out
}

// ---------------------------------------------------------------------------
// Files, their modules, their imports.

/// A `use` of one path: `use a::b::{c as d}` gives `a::b::c` as `d`.
#[derive(Debug, Clone)]
struct Used {
    path: Vec<String>,
    alias: Option<String>,
    public: bool,
    line: usize,
}

struct File {
    /// `src/cluster/watch/run.rs`
    path: String,
    /// `cluster::watch::run`; `lib.rs` is the crate's root (no segment),
    /// `main.rs` is `main`.
    module: Vec<String>,
    main: bool,
    /// A folder's `mod.rs` or `lib.rs`.
    front_door: bool,
    toks: Vec<Token>,
    uses: Vec<Used>,
    /// Where each `use` declaration starts and ends, in `toks`.
    use_spans: Vec<(usize, usize)>,
    /// The names its items are given (`fn x`, `struct X`, `mod x`, …).
    defines: BTreeSet<String>,
    /// The modules it declares: `mod x;`.
    children: Vec<String>,
}

impl File {
    fn new(path: &str, text: &str) -> File {
        let rel = path.strip_prefix("src/").unwrap_or(path);
        let rel = rel.strip_suffix(".rs").unwrap_or(rel);
        let mut module: Vec<String> = rel.split('/').map(String::from).collect();
        let main = rel == "main";
        let front_door = rel == "lib" || module.last().is_some_and(|m| m == "mod");
        if front_door {
            module.pop();
        }
        let toks = without_tests(tokens(text));
        let mut file = File {
            path: path.to_string(),
            module,
            main,
            front_door,
            toks,
            uses: Vec::new(),
            use_spans: Vec::new(),
            defines: BTreeSet::new(),
            children: Vec::new(),
        };
        file.read_items();
        file
    }

    fn read_items(&mut self) {
        let toks = &self.toks;
        for (i, t) in toks.iter().enumerate() {
            let next = toks.get(i + 1).and_then(Token::ident);
            match (t.ident(), next) {
                (Some("use"), _) if !toks.get(i + 1).is_some_and(|t| t.is('<')) => {
                    let public = match i.checked_sub(1).map(|p| &toks[p]) {
                        Some(p) if p.ident() == Some("pub") => true,
                        Some(p) if p.is(')') => toks[..i]
                            .iter()
                            .rposition(|t| t.is('('))
                            .and_then(|open| open.checked_sub(1))
                            .is_some_and(|p| toks[p].ident() == Some("pub")),
                        _ => false,
                    };
                    let mut pos = i + 1;
                    let mut found = Vec::new();
                    use_tree(toks, &mut pos, Vec::new(), &mut found);
                    let end = toks[pos.min(toks.len())..]
                        .iter()
                        .position(|t| t.is(';'))
                        .map_or(toks.len(), |p| pos + p);
                    self.use_spans.push((i, end));
                    self.uses
                        .extend(found.into_iter().map(|(path, alias, line)| Used {
                            path,
                            alias,
                            public,
                            line,
                        }));
                }
                (Some("mod"), Some(name)) => {
                    self.defines.insert(name.to_string());
                    if toks.get(i + 2).is_some_and(|t| t.is(';')) {
                        self.children.push(name.to_string());
                    }
                }
                (
                    Some(
                        "fn" | "struct" | "enum" | "const" | "static" | "type" | "trait" | "union",
                    ),
                    Some(name),
                ) => {
                    self.defines.insert(name.to_string());
                }
                (Some("macro_rules"), _) => {
                    if let Some(name) = toks.get(i + 2).and_then(Token::ident) {
                        self.defines.insert(name.to_string());
                    }
                }
                _ => {}
            }
        }
    }

    /// A path as the crate names it from its root, if it is one of the
    /// crate's: `super::x` in `a::b` is `a::x`. `aliases` are the modules
    /// this file imported under a name of their own.
    fn absolute(
        &self,
        path: &[String],
        modules: &BTreeMap<Vec<String>, usize>,
        aliases: &BTreeMap<String, Vec<String>>,
    ) -> Option<Vec<String>> {
        let (head, rest) = path.split_first()?;
        if let Some(module) = aliases.get(head) {
            return Some([module.as_slice(), rest].concat());
        }
        match head.as_str() {
            "finalizer_guard" if self.main => Some(rest.to_vec()),
            _ if self.main => None,
            "crate" => Some(rest.to_vec()),
            "self" => Some([self.module.as_slice(), rest].concat()),
            "super" => {
                let ups = path.iter().take_while(|s| *s == "super").count();
                let base = self.module.len().checked_sub(ups)?;
                Some([&self.module[..base], &path[ups..]].concat())
            }
            _ => {
                let child = [self.module.as_slice(), &path[..1]].concat();
                modules
                    .contains_key(&child)
                    .then(|| [self.module.as_slice(), path].concat())
            }
        }
    }

    /// `lib` for `lib.rs`, `main` for `main.rs`, else the top-level module.
    fn top(&self) -> &str {
        if self.main {
            "main"
        } else {
            self.module.first().map_or("lib", String::as_str)
        }
    }

    fn module_path(&self) -> String {
        if self.main || self.module.is_empty() {
            self.top().to_string()
        } else {
            self.module.join("::")
        }
    }
}

/// Reads one use tree at `pos`: `a::b`, `a::b as c`, `a::*`, `a::{…}`;
/// each path with its name and the line of its last segment.
fn use_tree(
    toks: &[Token],
    pos: &mut usize,
    prefix: Vec<String>,
    out: &mut Vec<(Vec<String>, Option<String>, usize)>,
) {
    let mut path = prefix;
    if toks.get(*pos).is_some_and(|t| t.tok == Tok::Sep) {
        *pos += 1;
    }
    while let Some(t) = toks.get(*pos) {
        match &t.tok {
            Tok::Ident(s) => {
                path.push(s.clone());
                *pos += 1;
                if toks.get(*pos).is_some_and(|t| t.tok == Tok::Sep) {
                    *pos += 1;
                    continue;
                }
                let mut alias = None;
                if toks.get(*pos).and_then(Token::ident) == Some("as") {
                    alias = toks.get(*pos + 1).and_then(Token::ident).map(String::from);
                    *pos += 2;
                }
                out.push((path, alias, t.line));
                return;
            }
            Tok::Punct('*') => {
                *pos += 1;
                path.push("*".into());
                out.push((path, None, t.line));
                return;
            }
            Tok::Punct('{') => {
                *pos += 1;
                while let Some(t) = toks.get(*pos) {
                    if t.is('}') {
                        *pos += 1;
                        return;
                    }
                    let before = *pos;
                    use_tree(toks, pos, path.clone(), out);
                    if toks.get(*pos).is_some_and(|t| t.is(',')) {
                        *pos += 1;
                    }
                    if *pos == before {
                        *pos += 1;
                    }
                }
                return;
            }
            _ => return,
        }
    }
}

/// One file importing another, at a line.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Edge {
    from: usize,
    to: usize,
    line: usize,
}

struct Graph {
    files: Vec<File>,
    /// One per file, line and file imported.
    edges: Vec<Edge>,
    problems: Vec<String>,
}

/// The file a path names: the module it names, or the file that defines
/// the item it names, through the re-exports of front doors.
fn resolve(
    path: &[String],
    files: &[File],
    modules: &BTreeMap<Vec<String>, usize>,
    depth: usize,
) -> Option<usize> {
    let known = (0..=path.len())
        .rev()
        .find(|&k| modules.contains_key(&path[..k]))?;
    let at = modules[&path[..known]];
    if known == path.len() || depth > 8 {
        return Some(at);
    }
    let name = &path[known];
    if name == "*" || name == "self" {
        return Some(at);
    }
    let file = &files[at];
    let mut globs = Vec::new();
    for used in file.uses.iter().filter(|u| u.public) {
        let Some(target) = file.absolute(&used.path, modules, &BTreeMap::new()) else {
            continue;
        };
        match target.last().map(String::as_str) {
            Some("*") => globs.push(target[..target.len() - 1].to_vec()),
            Some("self") => {
                let module = &target[..target.len() - 1];
                if used.alias.as_ref().or(module.last()) == Some(name) {
                    return resolve(module, files, modules, depth + 1).or(Some(at));
                }
            }
            Some(last) if used.alias.as_deref().unwrap_or(last) == name => {
                return resolve(&target, files, modules, depth + 1).or(Some(at));
            }
            _ => {}
        }
    }
    if file.defines.contains(name) {
        return Some(at);
    }
    for glob in globs {
        let there = modules.get(&glob).copied();
        if let Some(found) = resolve(
            &[glob.as_slice(), &path[known..]].concat(),
            files,
            modules,
            depth + 1,
        ) && (Some(found) != there || there.is_some_and(|t| files[t].defines.contains(name)))
        {
            return Some(found);
        }
    }
    Some(at)
}

/// Reads the files, keeps the production ones (those `lib.rs` and `main.rs`
/// reach through `mod x;` outside of tests), and checks their imports.
fn check(sources: &[(String, String)], rules: &Rules) -> Graph {
    let all: Vec<File> = sources.iter().map(|(p, t)| File::new(p, t)).collect();
    // Production files only: reached from the roots through `mod x;`.
    let by_module: BTreeMap<Vec<String>, usize> = all
        .iter()
        .enumerate()
        .filter(|(_, f)| !f.main)
        .map(|(i, f)| (f.module.clone(), i))
        .collect();
    let mut live = BTreeSet::new();
    let mut stack: Vec<usize> = (0..all.len())
        .filter(|&i| all[i].main || all[i].module.is_empty())
        .collect();
    while let Some(i) = stack.pop() {
        if !live.insert(i) {
            continue;
        }
        for child in &all[i].children {
            let module = if all[i].main {
                vec![child.clone()]
            } else {
                [all[i].module.as_slice(), std::slice::from_ref(child)].concat()
            };
            if let Some(&c) = by_module.get(&module) {
                stack.push(c);
            }
        }
    }
    let files: Vec<File> = all
        .into_iter()
        .enumerate()
        .filter(|(i, _)| live.contains(i))
        .map(|(_, f)| f)
        .collect();
    let modules: BTreeMap<Vec<String>, usize> = files
        .iter()
        .enumerate()
        .filter(|(_, f)| !f.main)
        .map(|(i, f)| (f.module.clone(), i))
        .collect();

    let mut edges = BTreeSet::new();
    for (i, file) in files.iter().enumerate() {
        // The modules this file imports by name (`use super::read;`,
        // `use crate::policy::{self}`): `read::pages` is then a path.
        let mut aliases = BTreeMap::new();
        for used in &file.uses {
            let Some(target) = file.absolute(&used.path, &modules, &BTreeMap::new()) else {
                continue;
            };
            let module = match target.last().map(String::as_str) {
                Some("self") => Some(target[..target.len() - 1].to_vec()),
                Some("*") => None,
                _ => Some(target.clone()),
            };
            if let Some(module) = module
                && let Some(&m) = modules.get(&module)
            {
                let alias = used.alias.clone().or(module.last().cloned());
                if let Some(alias) = alias {
                    aliases.insert(alias, module.clone());
                }
                // A module named is an import of it, but for a front door,
                // whose items are followed where they are used.
                if !files[m].front_door && m != i {
                    edges.insert(Edge {
                        from: i,
                        to: m,
                        line: used.line,
                    });
                }
                continue;
            }
            if let Some(to) = resolve(&target, &files, &modules, 0)
                && to != i
            {
                edges.insert(Edge {
                    from: i,
                    to,
                    line: used.line,
                });
            }
        }
        // Paths in the code: `crate::a::b`, `super::x::y`, `alias::item`.
        let toks = &file.toks;
        let in_use = |k: usize| file.use_spans.iter().any(|&(s, e)| s <= k && k <= e);
        for (k, t) in toks.iter().enumerate() {
            let Some(head) = t.ident() else { continue };
            let rooted = matches!(head, "crate" | "super")
                || (file.main && head == "finalizer_guard")
                || aliases.contains_key(head);
            let after_sep = k > 0 && toks[k - 1].tok == Tok::Sep;
            let before_sep = toks.get(k + 1).is_some_and(|t| t.tok == Tok::Sep);
            if !rooted || after_sep || !before_sep || in_use(k) {
                continue;
            }
            let mut path = vec![head.to_string()];
            let mut j = k;
            while toks.get(j + 1).is_some_and(|t| t.tok == Tok::Sep)
                && let Some(next) = toks.get(j + 2).and_then(Token::ident)
            {
                path.push(next.to_string());
                j += 2;
            }
            if let Some(target) = file.absolute(&path, &modules, &aliases)
                && let Some(to) = resolve(&target, &files, &modules, 0)
                && to != i
            {
                edges.insert(Edge {
                    from: i,
                    to,
                    line: t.line,
                });
            }
        }
    }
    let edges: Vec<Edge> = edges.into_iter().collect();
    let problems = judge(&files, &edges, rules);
    Graph {
        files,
        edges,
        problems,
    }
}

// ---------------------------------------------------------------------------
// The rules.

/// Whether `module` (`cluster::watch::run`) is `prefix` or inside it.
fn within(module: &str, prefix: &str) -> bool {
    module == prefix
        || module
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.starts_with("::"))
}

fn matches(step: &Step, from: &File, to: &File) -> bool {
    within(&from.module_path(), step.from) && within(&to.module_path(), step.to)
}

fn floor_of(rules: &Rules, top: &str) -> Option<usize> {
    rules
        .floors
        .iter()
        .position(|(_, modules)| modules.contains(&top))
}

/// Where a file stands inside a stacked folder: its place in the order,
/// the front door above all; `None` outside such a folder, `Some(None)`
/// for a file the order leaves out.
fn rank(rules: &Rules, file: &File) -> Option<Option<usize>> {
    let (_, order) = rules
        .stacked
        .iter()
        .find(|(folder, _)| *folder == file.top())?;
    Some(match file.module.get(1) {
        None => Some(order.len()),
        Some(name) => order.iter().position(|o| o == name),
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Down,
    Inside,
    Up,
    Sideways,
}

fn kind(rules: &Rules, from: &File, to: &File) -> Kind {
    let (a, b) = (floor_of(rules, from.top()), floor_of(rules, to.top()));
    if from.top() == to.top() {
        return match (rank(rules, from), rank(rules, to)) {
            (Some(Some(x)), Some(Some(y))) if y > x => Kind::Up,
            _ => Kind::Inside,
        };
    }
    match a.cmp(&b) {
        std::cmp::Ordering::Greater => Kind::Down,
        std::cmp::Ordering::Less => Kind::Up,
        std::cmp::Ordering::Equal => Kind::Sideways,
    }
}

fn judge(files: &[File], edges: &[Edge], rules: &Rules) -> Vec<String> {
    let mut problems = Vec::new();
    let present: BTreeSet<&str> = files.iter().map(File::top).collect();
    for top in &present {
        if floor_of(rules, top).is_none() {
            problems.push(format!(
                "module `{top}` is on no floor: give it one in FLOORS"
            ));
        }
    }
    for (floor, modules) in rules.floors {
        for m in modules.iter().filter(|m| !present.contains(*m)) {
            problems.push(format!(
                "FLOORS puts `{m}` on floor {floor}, and src/ has no such module"
            ));
        }
    }
    for file in files {
        if rank(rules, file) == Some(None) {
            problems.push(format!(
                "{}: not in the order of STACKED's {}",
                file.path,
                file.top()
            ));
        }
    }
    let waived = |e: &Edge| {
        rules
            .to_remove
            .iter()
            .any(|s| matches(s, &files[e.from], &files[e.to]))
    };
    for e in edges {
        let (from, to) = (&files[e.from], &files[e.to]);
        if waived(e) {
            continue;
        }
        match kind(rules, from, to) {
            Kind::Up => problems.push(format!(
                "{}:{}: upward, {} imports {}, which is above it",
                from.path, e.line, from.path, to.path
            )),
            Kind::Sideways if !rules.sideways.iter().any(|s| matches(s, from, to)) => {
                problems.push(format!(
                    "{}:{}: sideways, {} imports {} on its own floor: list the step in SIDEWAYS with its reason, or move what it needs below",
                    from.path, e.line, from.top(), to.top()
                ))
            }
            _ => {}
        }
    }
    for (list, steps) in [("SIDEWAYS", rules.sideways), ("TO_REMOVE", rules.to_remove)] {
        for step in steps {
            if !edges
                .iter()
                .any(|e| matches(step, &files[e.from], &files[e.to]))
            {
                problems.push(format!(
                    "{list}: {} -> {} matches no import any more: take it out",
                    step.from, step.to
                ));
            }
        }
    }
    let kept: Vec<&Edge> = edges.iter().filter(|e| !waived(e)).collect();
    for circle in circles(files.len(), &kept) {
        let mut said = String::from("a circle of files:");
        for e in &circle {
            let _ = write!(said, " {}:{} ->", files[e.from].path, e.line);
        }
        let _ = write!(said, " {}", files[circle[0].from].path);
        problems.push(said);
    }
    problems
}

/// One circle of each group of files that import each other (a strongly
/// connected component of more than one file): its imports, in order.
fn circles(n: usize, edges: &[&Edge]) -> Vec<Vec<Edge>> {
    let mut out: Vec<Vec<usize>> = vec![Vec::new(); n];
    for e in edges {
        out[e.from].push(e.to);
    }
    // Tarjan's algorithm.
    struct State {
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        groups: Vec<Vec<usize>>,
    }
    fn visit(v: usize, out: &[Vec<usize>], st: &mut State) {
        st.index[v] = Some(st.next);
        st.low[v] = st.next;
        st.next += 1;
        st.stack.push(v);
        st.on[v] = true;
        for &w in &out[v] {
            match st.index[w] {
                None => {
                    visit(w, out, st);
                    st.low[v] = st.low[v].min(st.low[w]);
                }
                Some(iw) if st.on[w] => st.low[v] = st.low[v].min(iw),
                Some(_) => {}
            }
        }
        if Some(st.low[v]) == st.index[v] {
            let mut group = Vec::new();
            while let Some(w) = st.stack.pop() {
                st.on[w] = false;
                group.push(w);
                if w == v {
                    break;
                }
            }
            if group.len() > 1 {
                st.groups.push(group);
            }
        }
    }
    let mut st = State {
        index: vec![None; n],
        low: vec![0; n],
        on: vec![false; n],
        stack: Vec::new(),
        next: 0,
        groups: Vec::new(),
    };
    for v in 0..n {
        if st.index[v].is_none() {
            visit(v, &out, &mut st);
        }
    }
    // In each group, the shortest way from its first file back to it.
    let mut circles = Vec::new();
    for group in st.groups {
        let inside: BTreeSet<usize> = group.iter().copied().collect();
        let start = *inside.iter().next().unwrap();
        let mut came: BTreeMap<usize, &Edge> = BTreeMap::new();
        let mut queue = VecDeque::from([start]);
        let mut last = None;
        'search: while let Some(v) = queue.pop_front() {
            for e in edges
                .iter()
                .filter(|e| e.from == v && inside.contains(&e.to))
            {
                if e.to == start {
                    last = Some(*e);
                    break 'search;
                }
                if let std::collections::btree_map::Entry::Vacant(seen) = came.entry(e.to) {
                    seen.insert(e);
                    queue.push_back(e.to);
                }
            }
        }
        let mut circle = Vec::new();
        let mut at = last.cloned();
        while let Some(e) = at {
            let from = e.from;
            circle.push(e);
            at = (from != start).then(|| came[&from].clone());
        }
        circle.reverse();
        circles.push(circle);
    }
    circles
}

// ---------------------------------------------------------------------------
// The picture.

fn picture_of(graph: &Graph, rules: &Rules) -> String {
    let files = &graph.files;
    let mut out = String::from("floors, bottom to top:\n");
    for (i, (name, modules)) in rules.floors.iter().enumerate() {
        let _ = writeln!(out, "  {i} {name}: {}", modules.join(", "));
    }
    // Import sites, floor to floor and module to module.
    let mut floors: BTreeMap<(usize, usize), usize> = BTreeMap::new();
    let mut tops: BTreeMap<(usize, &str, &str), usize> = BTreeMap::new();
    let mut sideways: BTreeMap<(&str, &str, String), usize> = BTreeMap::new();
    let mut upward: BTreeMap<(&str, &str, String), usize> = BTreeMap::new();
    for e in &graph.edges {
        let (from, to) = (&files[e.from], &files[e.to]);
        let (Some(a), Some(b)) = (floor_of(rules, from.top()), floor_of(rules, to.top())) else {
            continue;
        };
        let listed = || {
            let step = |list: &[Step]| {
                list.iter()
                    .find(|s| matches(s, from, to))
                    .map(|s| (s.from, s.to, s.why))
            };
            match (step(rules.sideways), step(rules.to_remove)) {
                (Some((_, _, why)), _) => format!("allowed: {why}"),
                (None, Some((x, y, why))) => format!("to remove, {x} -> {y}: {why}"),
                (None, None) => "NOT ALLOWED".into(),
            }
        };
        match kind(rules, from, to) {
            Kind::Inside => {}
            Kind::Down => {
                *floors.entry((a, b)).or_default() += 1;
                *tops.entry((b, from.top(), to.top())).or_default() += 1;
            }
            Kind::Sideways => {
                *sideways
                    .entry((from.top(), to.top(), listed()))
                    .or_default() += 1
            }
            Kind::Up if from.top() == to.top() => {
                *upward.entry((&from.path, &to.path, listed())).or_default() += 1
            }
            Kind::Up => *upward.entry((from.top(), to.top(), listed())).or_default() += 1,
        }
    }
    out.push_str("down, floor -> floor below: import sites (module -> module)\n");
    for ((a, b), n) in floors.iter().rev() {
        let by: Vec<String> = tops
            .iter()
            .filter(|((f, x, _), _)| *f == *b && floor_of(rules, x) == Some(*a))
            .map(|((_, x, y), n)| format!("{x} -> {y} {n}"))
            .collect();
        let _ = writeln!(
            out,
            "  {} -> {}: {n} ({})",
            rules.floors[*a].0,
            rules.floors[*b].0,
            by.join(", ")
        );
    }
    for (title, steps) in [("sideways, on one floor", &sideways), ("upward", &upward)] {
        let _ = writeln!(out, "{title}: import sites");
        if steps.is_empty() {
            out.push_str("  none\n");
        }
        for ((a, b, listed), n) in steps {
            let _ = writeln!(out, "  {a} -> {b}: {n} ({listed})");
        }
    }
    let every: Vec<&Edge> = graph.edges.iter().collect();
    let all = circles(files.len(), &every);
    let _ = writeln!(out, "circles of files (allowed ones too): {}", all.len());
    for circle in all {
        let names: Vec<&str> = circle.iter().map(|e| files[e.from].path.as_str()).collect();
        let _ = writeln!(out, "  {} -> {}", names.join(" -> "), names[0]);
    }
    let _ = writeln!(
        out,
        "{} files, {} imports (file, line, file imported)",
        files.len(),
        graph.edges.len()
    );
    out
}
