//! Plain scalars as Go's yaml.v2 resolves them for a bool or an int field.

/// YAML 1.1 booleans, the set Go's yaml.v2 resolves.
pub fn parse_yaml11_bool(text: &str) -> Option<bool> {
    match text {
        "y" | "Y" | "yes" | "Yes" | "YES" | "on" | "On" | "ON" | "true" | "True" | "TRUE" => {
            Some(true)
        }
        "n" | "N" | "no" | "No" | "NO" | "off" | "Off" | "OFF" | "false" | "False" | "FALSE" => {
            Some(false)
        }
        _ => None,
    }
}

/// An integer as yaml.v2 resolves a plain scalar for an int field.
pub fn parse_go_int(text: &str) -> Option<i64> {
    let cleaned: String = text.chars().filter(|c| *c != '_').collect();
    let (negative, digits) = match cleaned.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, cleaned.strip_prefix('+').unwrap_or(&cleaned)),
    };
    let parsed = if let Some(hex) = digits
        .strip_prefix("0x")
        .or_else(|| digits.strip_prefix("0X"))
    {
        i64::from_str_radix(hex, 16).ok()
    } else if let Some(bin) = digits
        .strip_prefix("0b")
        .or_else(|| digits.strip_prefix("0B"))
    {
        i64::from_str_radix(bin, 2).ok()
    } else if let Some(oct) = digits
        .strip_prefix("0o")
        .or_else(|| digits.strip_prefix("0O"))
    {
        i64::from_str_radix(oct, 8).ok()
    } else if digits.len() > 1
        && digits.starts_with('0')
        && digits.bytes().all(|b| b.is_ascii_digit())
    {
        i64::from_str_radix(&digits[1..], 8).ok()
    } else if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
        digits.parse::<i64>().ok()
    } else {
        // yaml.v2 truncates a float read into an int field.
        text.parse::<f64>()
            .ok()
            .filter(|f| f.is_finite() && f.abs() < 9.0e18)
            .map(|f| f.trunc().abs() as i64)
    };
    parsed.map(|n| if negative { -n } else { n })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_ints() {
        assert_eq!(parse_go_int("22"), Some(22));
        assert_eq!(parse_go_int("022"), Some(18));
        assert_eq!(parse_go_int("0x16"), Some(22));
        assert_eq!(parse_go_int("0b10110"), Some(22));
        assert_eq!(parse_go_int("2_2"), Some(22));
        assert_eq!(parse_go_int("-1"), Some(-1));
        assert_eq!(parse_go_int("22.9"), Some(22));
        assert_eq!(parse_go_int("abc"), None);
        assert_eq!(parse_go_int(""), None);
    }
}
