//! Bounded text: how much of a string taken from a request the core shows.

/// `s` cut to at most `max` characters (marked `...`), borrowed when it
/// fits: every string taken from a request that a message or an audit
/// record carries is cut by it.
pub fn truncated(s: &str, max: usize) -> std::borrow::Cow<'_, str> {
    if s.len() <= max || s.chars().count() <= max {
        std::borrow::Cow::Borrowed(s)
    } else {
        std::borrow::Cow::Owned(truncate(s, max))
    }
}

/// What ends a string [`truncate`] cut.
pub const CUT_MARK: &str = "...";

/// Cuts `s` to at most `max` characters, marking the cut with [`CUT_MARK`].
pub fn truncate(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut out: String = s.chars().take(max.saturating_sub(CUT_MARK.len())).collect();
    out.push_str(CUT_MARK);
    out
}
