//! JSON written straight into a buffer: the answer and the audit record are
//! a few known fields, so each string is escaped once, where it lands.

use std::fmt::Write as _;

/// Appends `s` as a JSON string, escaped as serde_json escapes it.
pub fn string(out: &mut String, s: &str) {
    out.push('"');
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let escape = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0x08 => "\\b",
            0x0c => "\\f",
            0..=0x1f => "",
            _ => continue,
        };
        // Escapes are ASCII, so `i` is a character boundary.
        out.push_str(&s[start..i]);
        if escape.is_empty() {
            let _ = write!(out, "\\u{b:04x}");
        } else {
            out.push_str(escape);
        }
        start = i + 1;
    }
    out.push_str(&s[start..]);
    out.push('"');
}

/// Appends `"key":` (keys are ours: nothing to escape).
pub fn key(out: &mut String, key: &str) {
    out.push('"');
    out.push_str(key);
    out.push_str("\":");
}

/// Appends `,"key":"value"`.
pub fn field(out: &mut String, name: &str, value: &str) {
    out.push(',');
    key(out, name);
    string(out, value);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_as_serde_json_does() {
        for s in [
            "",
            "plain",
            "quote \" backslash \\ slash /",
            "lines\nand\ttabs\r",
            "\u{0}\u{1}\u{8}\u{c}\u{1f}\u{7f}",
            "unicode é 漢字 \u{2028} 🦀",
        ] {
            let mut out = String::new();
            string(&mut out, s);
            assert_eq!(out, serde_json::to_string(s).unwrap(), "{s:?}");
        }
    }
}
