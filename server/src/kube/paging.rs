//! `limit` / `continue`: paginated lists that are one consistent snapshot.
//!
//! The continue token is kube's shape: base64url (no padding) of
//! `{"v":"meta.k8s.io/v1","rv":<revision>,"start":"<next key relative to
//! the collection prefix>"}`, plus, where the server knows it, `"remaining":
//! <items after the page>` (the `remainingItemCount` it answered with), so
//! the next page's count follows by subtraction instead of a scan of the
//! rest of the collection. Every page after the first is read at the
//! first page's revision from the MVCC history; `rv: -1` (only handed out
//! with a 410 for a compacted token) continues at the latest revision.

use base64::Engine as _;
use serde_json::json;

use crate::kube::error::KubeError;

const TOKEN_VERSION: &str = "meta.k8s.io/v1";

/// A decoded continue token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContinueToken {
    /// The snapshot revision, or `None` for "latest" (kube's `rv: -1`).
    pub revision: Option<u64>,
    /// The next key, relative to the collection prefix.
    pub start: String,
    /// Items from `start` on at `revision`, when the server counted them.
    pub remaining: Option<u64>,
}

impl ContinueToken {
    pub fn encode(&self) -> String {
        let rv = self.revision.map_or(-1, |r| r as i64);
        let mut body = json!({ "v": TOKEN_VERSION, "rv": rv, "start": self.start });
        if let Some(n) = self.remaining {
            body["remaining"] = json!(n);
        }
        let body = body.to_string();
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(body)
    }

    pub fn decode(token: &str) -> Result<Self, KubeError> {
        let bad = |why: &str| KubeError::BadRequest(format!("invalid continue token: {why}"));
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(token.trim_end_matches('='))
            .map_err(|_| bad("continue key is not valid base64"))?;
        let v: serde_json::Value =
            serde_json::from_slice(&bytes).map_err(|_| bad("continue key is not valid JSON"))?;
        if v["v"] != TOKEN_VERSION {
            return Err(bad("continue key is not a supported version"));
        }
        let rv = v["rv"]
            .as_i64()
            .ok_or_else(|| bad("continue key has no resource version"))?;
        let start = v["start"]
            .as_str()
            .ok_or_else(|| bad("continue key has no start"))?;
        if start.is_empty() || start.starts_with('/') || start.contains("..") {
            return Err(bad("continue key is not valid: start is not a valid key"));
        }
        Ok(Self {
            revision: u64::try_from(rv).ok().filter(|r| *r > 0),
            start: start.to_string(),
            remaining: v["remaining"].as_u64(),
        })
    }
}

/// The paging part of a list request.
#[derive(Debug, Clone, Default)]
pub struct PageRequest {
    /// At most this many items (0 or absent: all).
    pub limit: u64,
    pub token: Option<ContinueToken>,
}

/// kube's message for a continue token whose revision was compacted.
pub fn expired_continue(next: Option<String>) -> KubeError {
    let message = if next.is_some() {
        "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list."
    } else {
        "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter."
    };
    KubeError::ExpiredContinue {
        message: message.into(),
        token: next,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip_and_reject_garbage() {
        let t = ContinueToken {
            revision: Some(42),
            start: "default/b\u{0}".into(),
            remaining: Some(7),
        };
        assert_eq!(ContinueToken::decode(&t.encode()).expect("decode"), t);
        let latest = ContinueToken {
            revision: None,
            start: "x".into(),
            remaining: None,
        };
        assert!(latest.encode().len() > 10);
        assert_eq!(
            ContinueToken::decode(&latest.encode())
                .expect("decode")
                .revision,
            None
        );
        for bad in [
            "%%%",
            "bm90IGpzb24",
            &base64::engine::general_purpose::URL_SAFE_NO_PAD
                .encode(r#"{"v":"x","rv":1,"start":"a"}"#),
        ] {
            assert!(
                matches!(ContinueToken::decode(bad), Err(KubeError::BadRequest(_))),
                "{bad}"
            );
        }
    }
}

/// Property tests: any `continue` value is a token or a `400`, and every
/// token the server hands out decodes to itself.
#[cfg(test)]
mod proptests {
    use proptest::prelude::*;

    use super::*;
    use crate::fuzz;

    /// Token bodies of kube's shape with fields of any type and value.
    fn token_body() -> impl Strategy<Value = String> {
        (
            prop_oneof![Just(json!(TOKEN_VERSION)), fuzz::json_value()],
            prop_oneof![fuzz::edge_i64().prop_map(|n| json!(n)), fuzz::json_value()],
            prop_oneof![fuzz::text().prop_map(|s| json!(s)), fuzz::json_value()],
        )
            .prop_map(|(v, rv, start)| json!({"v": v, "rv": rv, "start": start}).to_string())
    }

    proptest! {
        #![proptest_config(fuzz::config())]

        #[test]
        fn any_continue_value_is_a_token_or_a_bad_request(
            raw in fuzz::text(),
            body in token_body(),
            padding in "={0,3}",
        ) {
            let encoded = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&body);
            for token in [raw, format!("{encoded}{padding}")] {
                match ContinueToken::decode(&token) {
                    Ok(t) => {
                        prop_assert!(!t.start.is_empty() && !t.start.starts_with('/'));
                        prop_assert!(!t.start.contains(".."));
                        prop_assert!(t.revision != Some(0));
                    }
                    Err(e) => prop_assert!(matches!(e, KubeError::BadRequest(_)), "{e:?}"),
                }
            }
        }

        #[test]
        fn every_token_handed_out_decodes_to_itself(
            revision in proptest::option::of(1..=i64::MAX as u64),
            start in "[a-z0-9][a-z0-9/.\u{0}-]{0,20}",
            remaining in proptest::option::of(any::<u64>()),
        ) {
            prop_assume!(!start.contains(".."));
            let token = ContinueToken { revision, start, remaining };
            prop_assert_eq!(ContinueToken::decode(&token.encode()).expect("decodes"), token);
        }
    }
}
