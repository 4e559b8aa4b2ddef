//! Node names as the console lists them, short at any fleet size: names that differ only
//! in a trailing number counting up by one become a range (`edge-05..edge-12`), and past
//! a few entries the rest is a count (`and 180 more`). Each name appears once.

/// At most this many entries (a name or a range) are shown before `and N more`.
pub const SHOWN: usize = 8;

/// `edge-01, edge-03..edge-09, db-1 and 12 more`, in the order given.
pub fn compact<S: AsRef<str>>(names: &[S]) -> String {
    let mut entries: Vec<(usize, usize)> = Vec::new();
    for (i, name) in names.iter().enumerate() {
        match entries.last_mut() {
            Some((_, end)) if follows(names[*end].as_ref(), name.as_ref()) => *end = i,
            _ => entries.push((i, i)),
        }
    }
    let mut shown: Vec<String> = Vec::new();
    let mut listed = 0;
    for &(start, end) in entries.iter().take(SHOWN) {
        let (first, last) = (names[start].as_ref(), names[end].as_ref());
        match end - start {
            0 => shown.push(first.to_string()),
            // Two in a row read better as two names than as a range.
            1 => shown.extend([first.to_string(), last.to_string()]),
            _ => shown.push(format!("{first}..{last}")),
        }
        listed += end - start + 1;
    }
    let mut text = shown.join(", ");
    if listed < names.len() {
        text.push_str(&format!(" and {} more", names.len() - listed));
    }
    text
}

/// Whether `next` is `name`'s successor: the same text before a trailing number one
/// higher, written with as many digits (or both without leading zeros).
fn follows(name: &str, next: &str) -> bool {
    let (Some((stem, digits)), Some((next_stem, next_digits))) = (split(name), split(next)) else {
        return false;
    };
    let unpadded = |d: &str| d == "0" || !d.starts_with('0');
    let (Ok(n), Ok(m)) = (digits.parse::<u64>(), next_digits.parse::<u64>()) else {
        return false;
    };
    stem == next_stem
        && n.checked_add(1) == Some(m)
        && (digits.len() == next_digits.len() || (unpadded(digits) && unpadded(next_digits)))
}

/// `edge-05` -> (`edge-`, `05`); `None` without a trailing number.
fn split(name: &str) -> Option<(&str, &str)> {
    let stem = name.trim_end_matches(|c: char| c.is_ascii_digit());
    (stem.len() < name.len()).then(|| name.split_at(stem.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_of_numbered_names_become_ranges_and_the_rest_a_count() {
        assert_eq!(compact::<&str>(&[]), "");
        assert_eq!(compact(&["a"]), "a");
        assert_eq!(compact(&["edge-01", "edge-02"]), "edge-01, edge-02");
        let fleet: Vec<String> = (5..20).map(|i| format!("edge-{i:02}")).collect();
        assert_eq!(compact(&fleet), "edge-05..edge-19");
        assert_eq!(
            compact(&["n8", "n9", "n10", "n11", "x", "n13"]),
            "n8..n11, x, n13"
        );
        // Padding that changes is not a run: n09 and n010 are not neighbours.
        assert_eq!(compact(&["n08", "n09", "n010"]), "n08, n09, n010");
        let scattered: Vec<String> = (0..40).map(|i| format!("edge-{:03}", i * 2)).collect();
        assert_eq!(
            compact(&scattered),
            "edge-000, edge-002, edge-004, edge-006, edge-008, edge-010, edge-012, edge-014 and 32 more"
        );
    }
}
