//! Response compression as kube-apiserver does it: gzip, when the client
//! sent `Accept-Encoding: gzip` and the response is at least 128 KiB
//! (kube's `defaultGzipThresholdBytes`), with `Vary: Accept-Encoding`.
//!
//! Only responses whose size is known before the first byte is sent are
//! candidates (an exact body size hint or a `Content-Length`): a watch
//! never is, so no watch event is held back in a compressor's buffer,
//! while a list (streamed, with its `Content-Length` computed up front)
//! is. tower-http's layer does the encoding; this module decides when.

use axum::http::{header, Response};
use tower_http::compression::predicate::Predicate;
use tower_http::compression::CompressionLayer;

/// kube-apiserver compresses responses of at least this many bytes.
pub const GZIP_THRESHOLD_BYTES: u64 = 128 * 1024;

/// Compresses responses of a known size of at least `min` bytes.
#[derive(Debug, Clone, Copy)]
pub struct KnownSizeAtLeast {
    pub min: u64,
}

impl Predicate for KnownSizeAtLeast {
    fn should_compress<B>(&self, response: &Response<B>) -> bool
    where
        B: axum::body::HttpBody,
    {
        let size = response.body().size_hint().exact().or_else(|| {
            response
                .headers()
                .get(header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<u64>().ok())
        });
        size.is_some_and(|n| n >= self.min)
    }
}

/// The compression layer of the REST router.
pub fn layer() -> CompressionLayer<KnownSizeAtLeast> {
    CompressionLayer::new()
        .gzip(true)
        .no_br()
        .no_deflate()
        .no_zstd()
        .compress_when(KnownSizeAtLeast {
            min: GZIP_THRESHOLD_BYTES,
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use axum::routing::get;
    use axum::Router;
    use tower::ServiceExt;

    fn app() -> Router {
        let big = "x".repeat(usize::try_from(GZIP_THRESHOLD_BYTES).unwrap_or(131_072));
        let small = "y".repeat(1024);
        Router::new()
            .route("/big", get(move || async move { big }))
            .route("/small", get(move || async move { small }))
            .route(
                "/stream",
                get(|| async {
                    let chunks =
                        (0..64).map(|_| Ok::<_, std::convert::Infallible>(vec![b'z'; 8192]));
                    Body::from_stream(futures::stream::iter(chunks))
                }),
            )
            .layer(layer())
    }

    async fn get_with(path: &str, accept: Option<&str>) -> Response<Body> {
        let mut req = Request::get(path);
        if let Some(a) = accept {
            req = req.header(header::ACCEPT_ENCODING, a);
        }
        app()
            .oneshot(req.body(Body::empty()).expect("a request"))
            .await
            .expect("infallible")
    }

    fn encoding(r: &Response<Body>) -> Option<&str> {
        r.headers()
            .get(header::CONTENT_ENCODING)
            .and_then(|v| v.to_str().ok())
    }

    #[tokio::test]
    async fn large_responses_are_gzipped_for_clients_that_accept_it() {
        let r = get_with("/big", Some("gzip")).await;
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(encoding(&r), Some("gzip"));
        assert_eq!(
            r.headers().get(header::VARY).and_then(|v| v.to_str().ok()),
            Some("accept-encoding")
        );
        let bytes = axum::body::to_bytes(r.into_body(), usize::MAX)
            .await
            .expect("body");
        let mut decoded = String::new();
        std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&bytes[..]), &mut decoded)
            .expect("valid gzip");
        assert_eq!(decoded.len() as u64, GZIP_THRESHOLD_BYTES);
        // Without Accept-Encoding: as it is, but still Vary.
        let plain = get_with("/big", None).await;
        assert_eq!(encoding(&plain), None);
    }

    #[tokio::test]
    async fn small_responses_and_streams_of_unknown_size_are_not() {
        assert_eq!(encoding(&get_with("/small", Some("gzip")).await), None);
        // A stream (a watch) is never held in a compressor's buffer.
        assert_eq!(encoding(&get_with("/stream", Some("gzip")).await), None);
    }
}
