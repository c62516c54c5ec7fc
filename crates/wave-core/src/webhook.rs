//! The webhook's paths and the secret token in them: how wave tells the apiserver from anyone else who
//! can reach its port (`docs/webhook.md`, "Who may call it").
//!
//! ```text
//! 32 random bytes ─► PathToken (64 lowercase hex digits, in a Secret of wave's namespace)
//!   ├─► served_path(kind, token) = /mutate-apps-v1-<kind>/<token>   what the server answers
//!   ├─► repaired_path / repaired_url: the registration's path with the current token, written into the
//!   │     MutatingWebhookConfiguration, which only cluster admins may read and the apiserver calls
//!   └─► authorized(request path): constant-time comparison; anything else is a bare 404
//! ```
//!
//! The apiserver offers no client identity that works on every cluster without configuring the
//! apiserver itself, but it does call exactly the path written in the registration, inside TLS. A path
//! only cluster admins can read is therefore a credential only the apiserver presents.

use subtle::ConstantTimeEq as _;

use crate::kind::WorkloadKind;

/// Random bytes in a token wave generates.
pub const TOKEN_BYTES: usize = 32;
/// The shortest token accepted from a Secret someone else wrote (43 random letters and digits carry
/// more than 200 bits; wave's own have 64 hex digits).
pub const TOKEN_MIN_LEN: usize = 43;
/// The longest token accepted: a segment of a `service.path` may not be longer.
pub const TOKEN_MAX_LEN: usize = 253;

/// The secret in the webhook's paths. Its `Debug` never shows it, so it cannot leak into a log line
/// through a `{:?}`.
#[derive(Clone, PartialEq, Eq)]
pub struct PathToken(String);

impl std::fmt::Debug for PathToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PathToken(<redacted>)")
    }
}

/// Why a stored token is not usable.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TokenError {
    /// Too short or too long.
    #[error("the token has {len} characters; it needs {TOKEN_MIN_LEN} to {TOKEN_MAX_LEN}")]
    Length {
        /// Its length.
        len: usize,
    },
    /// A character other than a lowercase letter or a digit: the apiserver accepts only lowercase
    /// RFC 1123 subdomains as segments of a `service.path`.
    #[error("the token may only use lowercase letters and digits")]
    Alphabet,
}

impl PathToken {
    /// The token for `bytes` (from a CSPRNG): lowercase hex, because the apiserver validates each
    /// segment of a `service.path` as a lowercase RFC 1123 subdomain (no `_`, no capitals).
    pub fn from_random(bytes: &[u8; TOKEN_BYTES]) -> Self {
        use std::fmt::Write as _;
        let mut hex = String::with_capacity(2 * TOKEN_BYTES);
        for b in bytes {
            let _ = write!(hex, "{b:02x}");
        }
        Self(hex)
    }

    /// A token read back from where it is kept. The message never quotes the value.
    pub fn parse(text: &str) -> Result<Self, TokenError> {
        let len = text.len();
        if !(TOKEN_MIN_LEN..=TOKEN_MAX_LEN).contains(&len) {
            return Err(TokenError::Length { len });
        }
        if !text.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()) {
            return Err(TokenError::Alphabet);
        }
        Ok(Self(text.to_string()))
    }

    /// The value, to store it or write it into the registration. Never log it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether `presented` is this token, in time that does not depend on where they differ.
    pub fn matches(&self, presented: &str) -> bool {
        // The length is not secret (every generated token has 64 characters); the content is.
        self.0.len() == presented.len() && bool::from(self.0.as_bytes().ct_eq(presented.as_bytes()))
    }
}

/// The path the apiserver called before wave had tokens, and still the start of every path:
/// `/mutate-<group>-<version>-<kind>`.
pub fn base_path(kind: WorkloadKind) -> String {
    let info = kind.info();
    format!(
        "/mutate-{}-{}-{}",
        info.group,
        info.version,
        info.kind.to_ascii_lowercase()
    )
}

/// The only path wave answers for `kind`: `/mutate-<group>-<version>-<kind>/<token>`.
pub fn served_path(kind: WorkloadKind, token: &PathToken) -> String {
    format!("{}/{}", base_path(kind), token.0)
}

/// The kind whose base path `path` starts with, and what follows it (`None` for the bare base path).
fn split(path: &str) -> Option<(WorkloadKind, Option<&str>)> {
    WorkloadKind::BUILT_IN.into_iter().find_map(|kind| {
        let rest = path.strip_prefix(&base_path(kind))?;
        match rest {
            "" => Some((kind, None)),
            _ => rest.strip_prefix('/').map(|t| (kind, Some(t))),
        }
    })
}

/// Whether a request for `path` carries `token`: one of the served paths. Anything else, the base paths
/// included, is answered as if nothing were there.
pub fn authorized(path: &str, token: &PathToken) -> bool {
    matches!(split(path), Some((_, Some(presented))) if token.matches(presented))
}

/// Whether `path` looks like one of wave's (with any token or none): a caller that uses it may hold a
/// stale token, so it is worth re-reading the current one soon.
pub fn is_wave_path(path: &str) -> bool {
    split(path).is_some()
}

/// The path a registration should call instead of `current` (its `service.path`), or `None` when it
/// already does, or when `current` is not one of wave's paths (left as it is).
pub fn repaired_path(current: &str, token: &PathToken) -> Option<String> {
    let (kind, _) = split(current)?;
    let wanted = served_path(kind, token);
    (wanted != current).then_some(wanted)
}

/// The same for a registration by `url` (`https://host[:port]/path`; the apiserver refuses queries and
/// fragments there).
pub fn repaired_url(current: &str, token: &PathToken) -> Option<String> {
    let authority_at = current.find("://")? + 3;
    let path_at = current[authority_at..]
        .find('/')
        .map_or(current.len(), |i| authority_at + i);
    let path = repaired_path(&current[path_at..], token)?;
    Some(format!("{}{path}", &current[..path_at]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token() -> PathToken {
        PathToken::from_random(&[7; TOKEN_BYTES])
    }

    #[test]
    fn a_generated_token_is_64_hex_digits_and_reads_back() {
        let t = token();
        assert_eq!(t.expose(), "07".repeat(TOKEN_BYTES));
        assert_eq!(PathToken::parse(t.expose()), Ok(t.clone()));
        assert_eq!(format!("{t:?}"), "PathToken(<redacted>)");
    }

    #[test]
    fn a_short_or_odd_token_is_refused_without_quoting_it() {
        assert_eq!(PathToken::parse("abc"), Err(TokenError::Length { len: 3 }));
        // A segment of a `service.path` must be a lowercase RFC 1123 subdomain.
        for odd in ["/", "_", "A", "-", "."] {
            let odd = format!("{}{odd}", "a".repeat(TOKEN_MIN_LEN));
            let err = PathToken::parse(&odd).unwrap_err();
            assert_eq!(err, TokenError::Alphabet);
            assert!(!err.to_string().contains("aaa"));
        }
        assert!(PathToken::parse(&"a".repeat(TOKEN_MAX_LEN)).is_ok());
        assert!(PathToken::parse(&"a".repeat(TOKEN_MAX_LEN + 1)).is_err());
    }

    #[test]
    fn only_a_base_path_followed_by_the_token_is_authorized() {
        let t = token();
        for kind in WorkloadKind::BUILT_IN {
            assert!(authorized(&served_path(kind, &t), &t), "{kind}");
            assert!(!authorized(&base_path(kind), &t), "{kind}: the old path");
            assert!(
                !authorized(&format!("{}/", base_path(kind)), &t),
                "{kind}: empty token"
            );
        }
        let wrong = PathToken::from_random(&[8; TOKEN_BYTES]);
        let served = served_path(WorkloadKind::DEPLOYMENT, &t);
        assert!(!authorized(&served_path(WorkloadKind::DEPLOYMENT, &wrong), &t));
        assert!(!authorized(&format!("{served}/"), &t), "a trailing slash");
        assert!(!authorized(&format!("{served}x"), &t), "a longer token");
        assert!(!authorized(&served[..served.len() - 1], &t), "a shorter token");
        assert!(!authorized(&format!("/x{served}"), &t));
        assert!(!authorized(
            &format!("/mutate-apps-v1-cronjob/{}", t.expose()),
            &t
        ));
        assert!(!authorized("/", &t));
    }

    #[test]
    fn a_registration_path_is_repaired_to_carry_the_current_token() {
        let t = token();
        let old = PathToken::from_random(&[9; TOKEN_BYTES]);
        let served = served_path(WorkloadKind::STATEFUL_SET, &t);
        assert_eq!(
            repaired_path("/mutate-apps-v1-statefulset", &t),
            Some(served.clone())
        );
        assert_eq!(
            repaired_path(&served_path(WorkloadKind::STATEFUL_SET, &old), &t),
            Some(served.clone()),
            "a rotated token"
        );
        assert_eq!(repaired_path(&served, &t), None, "already current");
        assert_eq!(repaired_path("/validate-something", &t), None, "not wave's");
        assert_eq!(repaired_path("/mutate-apps-v1-deploymentx", &t), None);
    }

    #[test]
    fn a_registration_url_keeps_its_host_and_port() {
        let t = token();
        let url = "https://127.0.0.1:9443/mutate-apps-v1-deployment";
        let want = format!(
            "https://127.0.0.1:9443{}",
            served_path(WorkloadKind::DEPLOYMENT, &t)
        );
        assert_eq!(repaired_url(url, &t), Some(want.clone()));
        assert_eq!(repaired_url(&want, &t), None);
        assert_eq!(
            repaired_url("https://wave.example", &t),
            None,
            "no path: not wave's"
        );
        assert_eq!(repaired_url("no scheme", &t), None);
    }
}
