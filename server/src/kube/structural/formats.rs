//! The string formats kube-openapi's default registry checks, as its
//! `strfmt` validates them (go-openapi's regular expressions and
//! parsers).

use std::sync::LazyLock;

use regex::Regex;

fn re(pattern: &str) -> Regex {
    // The patterns below are constants of this file, covered by its
    // tests: one that does not compile is a build defect.
    Regex::new(pattern).expect("a valid format pattern")
}

static HOSTNAME: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"^([a-zA-Z0-9\p{S}\p{L}]((-?[a-zA-Z0-9\p{S}\p{L}]{0,62})?)|([a-zA-Z0-9\p{S}\p{L}](([a-zA-Z0-9-\p{S}\p{L}]{0,61}[a-zA-Z0-9\p{S}\p{L}])?)(\.)){1,}([a-zA-Z\p{L}]){2,63})$",
    )
});
static EMAIL: LazyLock<Regex> = LazyLock::new(|| re(r"^[^@\s]+@[^@\s]+$"));
static UUID: LazyLock<Regex> =
    LazyLock::new(|| re(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$"));
static UUID3: LazyLock<Regex> = LazyLock::new(|| {
    re(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?3[0-9a-f]{3}-?[0-9a-f]{4}-?[0-9a-f]{12}$")
});
static UUID4: LazyLock<Regex> = LazyLock::new(|| {
    re(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?4[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}$")
});
static UUID5: LazyLock<Regex> = LazyLock::new(|| {
    re(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?5[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}$")
});
static ISBN10: LazyLock<Regex> = LazyLock::new(|| re(r"^(?:[0-9]{9}X|[0-9]{10})$"));
static ISBN13: LazyLock<Regex> = LazyLock::new(|| re(r"^(?:[0-9]{13})$"));
static CREDIT: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"^(?:4[0-9]{12}(?:[0-9]{3})?|5[1-5][0-9]{14}|6(?:011|5[0-9][0-9])[0-9]{12}|3[47][0-9]{13}|3(?:0[0-5]|[68][0-9])[0-9]{11}|(?:2131|1800|35\d{3})\d{11})$",
    )
});
static SSN: LazyLock<Regex> = LazyLock::new(|| re(r"^\d{3}[- ]?\d{2}[- ]?\d{4}$"));
static HEXCOLOR: LazyLock<Regex> = LazyLock::new(|| re(r"^#?([0-9a-fA-F]{3}|[0-9a-fA-F]{6})$"));
static RGBCOLOR: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"^rgb\(\s*(0|[1-9]\d?|1\d\d?|2[0-4]\d|25[0-5])\s*,\s*(0|[1-9]\d?|1\d\d?|2[0-4]\d|25[0-5])\s*,\s*(0|[1-9]\d?|1\d\d?|2[0-4]\d|25[0-5])\s*\)$",
    )
});
static DURATION: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"^[-+]?([0-9]*(\.[0-9]*)?[a-z]+)+$|^(\d+)\s*(ns|us|µs|ms|s|m|h|d|w)$|^(\d+)\s*(nanoseconds?|microseconds?|milliseconds?|seconds?|minutes?|hours?|days?|weeks?)$",
    )
});
static BSON: LazyLock<Regex> = LazyLock::new(|| re(r"^[0-9a-fA-F]{24}$"));
static DATETIME: LazyLock<Regex> = LazyLock::new(|| {
    re(r"^\d{4}-\d{2}-\d{2}([Tt ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?([Zz]|[+-]\d{2}:?\d{2})?)?$")
});

/// Whether `s` is valid in the (normalised, `-`-less) format.
pub(super) fn valid(format: &str, s: &str) -> bool {
    use base64::Engine as _;
    match format {
        "bsonobjectid" => BSON.is_match(s),
        "uri" => url::Url::parse(s).is_ok(),
        "email" => EMAIL.is_match(s),
        "hostname" => s.len() <= 255 && HOSTNAME.is_match(s),
        "ipv4" => s.parse::<std::net::Ipv4Addr>().is_ok(),
        "ipv6" => s.contains(':') && s.parse::<std::net::Ipv6Addr>().is_ok(),
        "cidr" => cidr(s),
        "mac" => mac(s),
        "uuid" => UUID.is_match(s),
        "uuid3" => UUID3.is_match(s),
        "uuid4" => UUID4.is_match(s),
        "uuid5" => UUID5.is_match(s),
        "isbn" => {
            ISBN10.is_match(&s.replace(['-', ' '], ""))
                || ISBN13.is_match(&s.replace(['-', ' '], ""))
        }
        "isbn10" => ISBN10.is_match(&s.replace(['-', ' '], "")),
        "isbn13" => ISBN13.is_match(&s.replace(['-', ' '], "")),
        "creditcard" => {
            CREDIT.is_match(&s.chars().filter(char::is_ascii_digit).collect::<String>())
        }
        "ssn" => SSN.is_match(s),
        "hexcolor" => HEXCOLOR.is_match(s),
        "rgbcolor" => RGBCOLOR.is_match(s),
        "byte" => base64::engine::general_purpose::STANDARD.decode(s).is_ok(),
        "date" => chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d").is_ok() && s.len() == 10,
        "datetime" => DATETIME.is_match(s) && datetime(s),
        "duration" => DURATION.is_match(s),
        _ => true,
    }
}

/// strfmt's `ParseDateTime`: RFC 3339 with or without fractional
/// seconds, `T`, `t` or a space between date and time.
fn datetime(s: &str) -> bool {
    let normal = s
        .replacen(' ', "T", 1)
        .replacen('t', "T", 1)
        .replacen('z', "Z", 1);
    chrono::DateTime::parse_from_rfc3339(&normal).is_ok()
        || chrono::NaiveDateTime::parse_from_str(&normal, "%Y-%m-%dT%H:%M:%S%.f").is_ok()
        || chrono::NaiveDateTime::parse_from_str(&normal, "%Y-%m-%dT%H:%M").is_ok()
        || chrono::NaiveDate::parse_from_str(&normal, "%Y-%m-%d").is_ok()
        || chrono::DateTime::parse_from_str(&normal, "%Y-%m-%dT%H:%M:%S%.f%z").is_ok()
}

fn cidr(s: &str) -> bool {
    let Some((ip, bits)) = s.split_once('/') else {
        return false;
    };
    let Ok(bits) = bits.parse::<u8>() else {
        return false;
    };
    match ip.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(_)) => bits <= 32,
        Ok(std::net::IpAddr::V6(_)) => bits <= 128,
        Err(_) => false,
    }
}

/// Go's `net.ParseMAC`: 6, 8 or 20 octets, `:`- or `-`-separated
/// pairs or `.`-separated quads.
fn mac(s: &str) -> bool {
    let hex = |p: &str, n: usize| p.len() == n && p.chars().all(|c| c.is_ascii_hexdigit());
    let ok_len = |n: usize| n == 6 || n == 8 || n == 20;
    for sep in [':', '-'] {
        let parts: Vec<&str> = s.split(sep).collect();
        if parts.len() > 1 && ok_len(parts.len()) && parts.iter().all(|p| hex(p, 2)) {
            return true;
        }
    }
    let quads: Vec<&str> = s.split('.').collect();
    quads.len() > 1 && ok_len(quads.len() * 2) && quads.iter().all(|p| hex(p, 4))
}
