//! A small Kubernetes REST client for tests: every call returns the HTTP
//! status, the headers and the JSON body, so tests can assert on all three.

use reqwest::header::HeaderMap;
use reqwest::{Method, StatusCode};
use serde_json::Value;

#[derive(Debug, Clone)]
pub struct KubeClient {
    http: reqwest::Client,
    base: String,
}

/// One response.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Value,
    pub text: String,
}

impl Reply {
    /// `metadata.resourceVersion` of the body, as a number.
    pub fn rv(&self) -> u64 {
        self.body["metadata"]["resourceVersion"]
            .as_str()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0)
    }

    /// The `X-Kubestore-Read` header: how the server served a read.
    pub fn read_path(&self) -> Option<&str> {
        self.headers
            .get("x-kubestore-read")
            .and_then(|v| v.to_str().ok())
    }

    /// The names of a list's items.
    pub fn names(&self) -> Vec<String> {
        self.body["items"]
            .as_array()
            .map(|items| {
                items
                    .iter()
                    .filter_map(|i| i["metadata"]["name"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl KubeClient {
    pub fn new(http: reqwest::Client, base: String) -> Self {
        Self { http, base }
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    /// Sends a request with an optional body and content type.
    pub async fn request(
        &self,
        method: Method,
        path: &str,
        body: Option<(Vec<u8>, &str)>,
    ) -> anyhow::Result<Reply> {
        let mut req = self.http.request(method, format!("{}{path}", self.base));
        if let Some((bytes, ct)) = body {
            req = req.header("content-type", ct).body(bytes);
        }
        let resp = req.send().await?;
        let status = resp.status();
        let headers = resp.headers().clone();
        let text = resp.text().await?;
        let body = serde_json::from_str(&text).unwrap_or(Value::Null);
        Ok(Reply {
            status,
            headers,
            body,
            text,
        })
    }

    pub async fn get(&self, path: &str) -> anyhow::Result<Reply> {
        self.request(Method::GET, path, None).await
    }

    pub async fn post(&self, path: &str, body: &Value) -> anyhow::Result<Reply> {
        self.request(
            Method::POST,
            path,
            Some((body.to_string().into_bytes(), "application/json")),
        )
        .await
    }

    pub async fn put(&self, path: &str, body: &Value) -> anyhow::Result<Reply> {
        self.request(
            Method::PUT,
            path,
            Some((body.to_string().into_bytes(), "application/json")),
        )
        .await
    }

    pub async fn delete(&self, path: &str) -> anyhow::Result<Reply> {
        self.request(Method::DELETE, path, None).await
    }

    /// Creates a configmap `name` in `ns` with one data entry.
    pub async fn create_configmap(
        &self,
        ns: &str,
        name: &str,
        value: &str,
    ) -> anyhow::Result<Reply> {
        let body = serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": { "name": name }, "data": { "value": value }
        });
        self.post(&format!("/api/v1/namespaces/{ns}/configmaps"), &body)
            .await
    }
}

/// An open watch: its events, one JSON object per line.
pub struct WatchStream {
    stream: std::pin::Pin<Box<dyn futures::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>,
    buf: Vec<u8>,
}

impl WatchStream {
    /// The next event, or `None` when the server ended the stream.
    pub async fn next_event(
        &mut self,
        timeout: std::time::Duration,
    ) -> anyhow::Result<Option<Value>> {
        use futures::StreamExt;
        loop {
            if let Some(pos) = self.buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=pos).collect();
                return Ok(Some(serde_json::from_slice(&line)?));
            }
            match tokio::time::timeout(timeout, self.stream.next()).await {
                Err(_) => anyhow::bail!("no watch event within {timeout:?}"),
                Ok(None) => return Ok(None),
                Ok(Some(chunk)) => self.buf.extend_from_slice(&chunk?),
            }
        }
    }
}

impl KubeClient {
    /// Opens `GET <path>` as a watch stream (the caller adds `watch=1`).
    pub async fn watch(&self, path: &str) -> anyhow::Result<WatchStream> {
        let resp = self.http.get(format!("{}{path}", self.base)).send().await?;
        anyhow::ensure!(
            resp.status() == StatusCode::OK,
            "watch answered {}: {}",
            resp.status(),
            resp.text().await?
        );
        Ok(WatchStream {
            stream: Box::pin(resp.bytes_stream()),
            buf: Vec::new(),
        })
    }
}
