//! Sizes and durations as people read them, the same wherever they are printed (the
//! live status line, the kit's summary, report.html). A leaf: it depends on nothing else
//! in the crate.

/// `812 B`, `2.4 KiB`, `41.2 MiB`.
pub fn size(bytes: u64) -> String {
    const KIB: f64 = 1024.0;
    match bytes {
        0..1024 => format!("{bytes} B"),
        1024..1_048_576 => format!("{:.1} KiB", bytes as f64 / KIB),
        _ => format!("{:.1} MiB", bytes as f64 / (KIB * KIB)),
    }
}

/// `5s`, `2m05s`, `1h01m`: whole seconds, for a line that changes every second.
pub fn duration(secs: f64) -> String {
    let secs = if secs.is_finite() {
        secs.max(0.0) as u64
    } else {
        0
    };
    if secs >= 3600 {
        format!("{}h{:02}m", secs / 3600, (secs / 60) % 60)
    } else if secs >= 60 {
        format!("{}m{:02}s", secs / 60, secs % 60)
    } else {
        format!("{secs}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_durations_read_well() {
        assert_eq!(size(812), "812 B");
        assert_eq!(size(2458), "2.4 KiB");
        assert_eq!(size(43_200_000), "41.2 MiB");
        assert_eq!(duration(5.2), "5s");
        assert_eq!(duration(125.0), "2m05s");
        assert_eq!(duration(3700.0), "1h01m");
    }
}
