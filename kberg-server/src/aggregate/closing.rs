//! The headers that end an HTTP upstream's session once its credential changed.
//!
//! rmcp's client ends a Streamable HTTP session with a `DELETE` carrying the headers the
//! connection was started with. When the credential in them was rotated or revoked meanwhile
//! (an app that reconnects with the new credential, or drops the connection whose credential is
//! gone), that `DELETE` would send the old credential once more: to the upstream, which refuses
//! a rotated one and leaves the session open, and as one more use of a credential that should
//! no longer be sent at all. The app says which headers go instead
//! ([`Aggregator::close_with_headers`](super::Aggregator::close_with_headers)), and the
//! connection's HTTP client ([`UpstreamHttp`]) sends the `DELETE` with them in place of the
//! configured ones; every other request keeps the configured headers.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};

use axum::http::{HeaderName, HeaderValue};
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::common::client_side_sse::BoxedSseResponse;
use rmcp::transport::streamable_http_client::{
    StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};

/// The headers the session's `DELETE` carries in place of the configured ones; `None` until
/// the app says. Shared by the upstream and each of its connections' HTTP clients.
#[derive(Clone, Default)]
pub(super) struct ClosingHeaders(Arc<Mutex<Option<HeaderList>>>);

/// Headers as they are sent.
pub(super) type HeaderList = Vec<(HeaderName, HeaderValue)>;

impl std::fmt::Debug for ClosingHeaders {
    // The values are credentials: only whether there are any is shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClosingHeaders(..)")
    }
}

impl ClosingHeaders {
    /// `headers` as HTTP headers, or the name of the first that cannot be sent.
    pub(super) fn check(headers: &[(String, String)]) -> Result<HeaderList, String> {
        headers
            .iter()
            .map(|(k, v)| {
                match (
                    HeaderName::try_from(k.as_str()),
                    HeaderValue::try_from(v.as_str()),
                ) {
                    (Ok(k), Ok(mut v)) => {
                        v.set_sensitive(true);
                        Ok((k, v))
                    }
                    _ => Err(k.clone()),
                }
            })
            .collect()
    }

    /// From now on the session's `DELETE` carries `headers` in place of the configured ones.
    pub(super) fn set(&self, headers: HeaderList) {
        if let Ok(mut h) = self.0.lock() {
            *h = Some(headers);
        }
    }

    /// What the app said, if it did.
    pub(super) fn get(&self) -> Option<HeaderList> {
        self.0.lock().ok().and_then(|h| h.clone())
    }
}

/// An HTTP upstream connection's client: `reqwest` as rmcp drives it, except that the
/// session's `DELETE` carries the [`ClosingHeaders`] in place of the configured ones once the
/// app has said which.
#[derive(Clone)]
pub(super) struct UpstreamHttp {
    pub(super) inner: reqwest::Client,
    /// The names of the configured headers (the credentials), taken out of the `DELETE`.
    pub(super) configured: Arc<[HeaderName]>,
    pub(super) closing: ClosingHeaders,
}

type Headers = HashMap<HeaderName, HeaderValue>;
type HttpError = StreamableHttpError<reqwest::Error>;

impl StreamableHttpClient for UpstreamHttp {
    type Error = reqwest::Error;

    fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: Headers,
    ) -> impl Future<Output = Result<StreamableHttpPostResponse, HttpError>> + Send + '_ {
        self.inner
            .post_message(uri, message, session_id, auth_header, custom_headers)
    }

    fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: Headers,
        max_sse_event_size: usize,
    ) -> impl Future<Output = Result<StreamableHttpPostResponse, HttpError>> + Send + '_ {
        self.inner.post_message_with_max_sse_event_size(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            max_sse_event_size,
        )
    }

    fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: Headers,
        limits: StreamableHttpResponseLimits,
    ) -> impl Future<Output = Result<StreamableHttpPostResponse, HttpError>> + Send + '_ {
        self.inner.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            limits,
        )
    }

    fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        mut custom_headers: Headers,
    ) -> impl Future<Output = Result<(), HttpError>> + Send + '_ {
        if let Some(closing) = self.closing.get() {
            for name in self.configured.iter() {
                custom_headers.remove(name);
            }
            custom_headers.extend(closing);
        }
        self.inner
            .delete_session(uri, session_id, auth_header, custom_headers)
    }

    fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: Headers,
    ) -> impl Future<Output = Result<BoxedSseResponse, HttpError>> + Send + '_ {
        self.inner
            .get_stream(uri, session_id, last_event_id, auth_header, custom_headers)
    }

    fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: Headers,
        max_sse_event_size: usize,
    ) -> impl Future<Output = Result<BoxedSseResponse, HttpError>> + Send + '_ {
        self.inner.get_stream_with_max_sse_event_size(
            uri,
            session_id,
            last_event_id,
            auth_header,
            custom_headers,
            max_sse_event_size,
        )
    }
}
