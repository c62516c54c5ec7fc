//! Go durations (`10h`, `1h30m`, `300ms`), as Wave's flags and wave's annotations spell them.

use std::collections::BTreeMap;
use std::time::Duration;

/// The Go duration in annotation `key`, else `default`. The second value says why a bad annotation was
/// ignored (the default then applies), for the caller to log.
pub fn annotation(
    annotations: &BTreeMap<String, String>,
    key: &str,
    default: Duration,
) -> (Duration, Option<String>) {
    match annotations.get(key) {
        None => (default, None),
        Some(value) => match parse_go_duration(value.trim()) {
            Ok(d) => (d, None),
            Err(e) => (default, Some(format!("{key}: {e}; using {default:?}"))),
        },
    }
}

/// Parses a Go duration: a sequence of decimal numbers with units `ns`, `us`, `µs`, `ms`, `s`, `m`, `h`
/// (`10h`, `1h30m`, `1.5h`, `300ms`). `0` alone is allowed.
pub fn parse_go_duration(s: &str) -> Result<Duration, String> {
    let err = || format!("{s:?} is not a Go duration (e.g. 10h, 1h30m, 300ms)");
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    let mut rest = s.strip_prefix('+').unwrap_or(s);
    if rest.is_empty() || rest.starts_with('-') {
        return Err(err());
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(err)?;
        let value: f64 = rest[..num_len].parse().map_err(|_| err())?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let seconds = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(err()),
        };
        total += value * seconds;
        rest = &rest[unit_len..];
    }
    Duration::try_from_secs_f64(total).map_err(|_| err())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_parse_like_go() {
        assert_eq!(parse_go_duration("10h"), Ok(Duration::from_secs(36_000)));
        assert_eq!(parse_go_duration("1h30m"), Ok(Duration::from_secs(5_400)));
        assert_eq!(parse_go_duration("1.5h"), Ok(Duration::from_secs(5_400)));
        assert_eq!(parse_go_duration("300ms"), Ok(Duration::from_millis(300)));
        assert_eq!(parse_go_duration("0"), Ok(Duration::ZERO));
        for bad in ["", "10", "h", "5x", "-1s", "1h-30m"] {
            assert!(parse_go_duration(bad).is_err(), "{bad:?} must be rejected");
        }
    }
}
