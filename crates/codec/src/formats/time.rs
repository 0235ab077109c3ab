//! Timestamps of external formats, to milliseconds since the Unix epoch.

/// Parses an RFC 3339 timestamp (`2026-03-01T10:22:01.123Z`, offsets allowed).
pub fn rfc3339_ms(text: &str) -> Result<i64, String> {
    let bad = || format!("`{text}` is not an RFC 3339 timestamp");
    let b = text.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return Err(bad());
    }
    let num = |range: std::ops::Range<usize>| -> Result<i64, String> {
        let s = text.get(range).ok_or_else(bad)?;
        if !s.bytes().all(|c| c.is_ascii_digit()) {
            return Err(bad());
        }
        s.parse().map_err(|_| bad())
    };
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    if b[13] != b':' || b[16] != b':' {
        return Err(bad());
    }
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return Err(bad());
    }
    let mut i = 19;
    let mut millis = 0;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        if i == start {
            return Err(bad());
        }
        let digits = &text[start..i.min(start + 3)];
        millis = digits.parse::<i64>().map_err(|_| bad())? * 10_i64.pow(3 - digits.len() as u32);
    }
    let offset_min = match b.get(i) {
        Some(b'Z' | b'z') if i + 1 == b.len() => 0,
        Some(sign @ (b'+' | b'-')) if b.len() == i + 6 && b[i + 3] == b':' => {
            let minutes = num(i + 1..i + 3)? * 60 + num(i + 4..i + 6)?;
            if *sign == b'+' { minutes } else { -minutes }
        }
        _ => return Err(bad()),
    };
    let days = days_from_civil(year, month, day);
    Ok(((days * 86_400 + hour * 3600 + minute * 60 + second - offset_min * 60) * 1000) + millis)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Epoch seconds as a float (Fluent Bit's `@timestamp`), to milliseconds.
pub fn epoch_seconds_ms(seconds: f64) -> Result<i64, String> {
    if !seconds.is_finite() || seconds.abs() > 1e11 {
        return Err(format!("timestamp {seconds} is not epoch seconds"));
    }
    Ok((seconds * 1000.0).round() as i64)
}

/// Unix nanoseconds (OTLP) to milliseconds.
pub fn nanos_ms(nanos: u64) -> i64 {
    (nanos / 1_000_000) as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_utc_offsets_and_fractions() {
        assert_eq!(rfc3339_ms("1970-01-01T00:00:00Z"), Ok(0));
        assert_eq!(rfc3339_ms("2026-03-01T10:22:01.5Z"), Ok(1_772_360_521_500));
        assert_eq!(
            rfc3339_ms("2026-03-01T11:22:01.500+01:00"),
            Ok(1_772_360_521_500)
        );
        assert_eq!(
            rfc3339_ms("2026-03-01T10:22:01.123456789Z"),
            Ok(1_772_360_521_123)
        );
        assert_eq!(rfc3339_ms("2000-02-29T00:00:00Z"), Ok(951_782_400_000));
        for bad in [
            "",
            "yesterday",
            "2026-13-01T00:00:00Z",
            "2026-03-01T10:22:01",
            "2026-03-01T10:22:01.Z",
        ] {
            assert!(rfc3339_ms(bad).is_err(), "{bad}");
        }
        assert_eq!(epoch_seconds_ms(1_700_000_000.25), Ok(1_700_000_000_250));
        assert!(epoch_seconds_ms(f64::NAN).is_err());
    }
}
