//! Values and comments as the suggested YAML writes them, escaped so that
//! nothing the evidence holds can end a line, and the names a rule can hold.

/// Characters never written as themselves: control characters (C0, DEL and
/// C1, NEL among them), the Unicode line and paragraph separators (line
/// breaks to a YAML 1.1 parser), and the invisible format characters that
/// hide or reorder text (zero-width, bidirectional controls, byte order mark,
/// tags), besides the non-characters a YAML parser refuses.
pub(super) fn hidden(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{00AD}'
                | '\u{061C}'
                | '\u{180E}'
                | '\u{200B}'..='\u{200F}'
                | '\u{2028}'..='\u{202E}'
                | '\u{2060}'..='\u{2064}'
                | '\u{2066}'..='\u{206F}'
                | '\u{FEFF}'
                | '\u{FFF9}'..='\u{FFFB}'
                | '\u{FFFE}'
                | '\u{FFFF}'
                | '\u{E0000}'..='\u{E007F}'
        )
}

/// `s` with `\`, the hidden characters (and in a quoted scalar, `"`) escaped
/// as YAML's double-quoted scalars (and JSON) write them: `\n`, `\u2028`.
fn escape(s: &str, quote: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' if quote => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if hidden(c) && u32::from(c) > 0xFFFF => {
                out.push_str(&format!("\\U{:08X}", u32::from(c)));
            }
            c if hidden(c) => out.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => out.push(c),
        }
    }
    out
}

/// A YAML double-quoted scalar: whatever `s` holds, one value on one line.
pub(super) fn quoted(s: &str) -> String {
    format!("\"{}\"", escape(s, true))
}

/// Text for a comment: whatever `s` holds, the comment stays one line.
pub(super) fn comment(s: &str) -> String {
    escape(s, false)
}

/// A name a rule can hold: not empty, no whitespace, nothing hidden.
pub(super) fn writable(s: &str) -> bool {
    !s.is_empty() && !s.chars().any(|c| c.is_whitespace() || hidden(c))
}

/// A finalizer name a rule can hold as an exact name (no `*`).
pub(super) fn writable_finalizer(f: &str) -> bool {
    writable(f) && !f.contains('*')
}

/// `resource` or `resource.group` as rules write them (lowercase, digits, `-`, `.`).
pub(super) fn writable_resource(r: &str) -> bool {
    let (resource, group) = r.split_once('.').unwrap_or((r, ""));
    !resource.is_empty()
        && !group.starts_with('.')
        && !group.ends_with('.')
        && r.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
}

pub(super) fn list(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| quoted(s)).collect();
    format!("[{}]", quoted.join(", "))
}

pub(super) fn indented(lines: &[String], indent: &str) -> String {
    lines.iter().map(|l| format!("{indent}{l}\n")).collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn values_stay_values_and_comments_stay_one_line() {
        let nasty = [
            "a\nmode: warn",
            "a\r\nb",
            "x\u{85}y",
            "x\u{2028}y\u{2029}z",
            "\"]\n- name: x",
            "back\\slash\\n",
            "\u{202E}lortnoc",
            "\u{0}\u{7}\u{1b}[2J\u{7f}\u{9f}",
            "tab\there",
            "\u{feff}bom\u{200b}",
            "tag\u{E0041}",
            "é ü 日本 🦀",
        ];
        for s in nasty {
            let read: BTreeMap<String, String> =
                serde_yaml_ng::from_str(&format!("key: {}\n", quoted(s))).unwrap();
            assert_eq!(read["key"], s, "{}", quoted(s));
            let text = format!("# {}\nkey: 1\n", comment(s));
            assert_eq!(text.lines().count(), 2, "{text}");
            let read: BTreeMap<String, u32> = serde_yaml_ng::from_str(&text).unwrap();
            assert_eq!(read.len(), 1, "{text}");
            assert!(!quoted(s).chars().any(hidden), "{}", quoted(s));
            assert!(!comment(s).chars().any(hidden), "{}", comment(s));
        }
        assert_eq!(comment("a\nb\\n\u{2028}"), "a\\nb\\\\n\\u2028");
        assert_eq!(quoted("日本 \"x\""), "\"日本 \\\"x\\\"\"");
    }
}
