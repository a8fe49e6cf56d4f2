//! The order of what an upstream says around its answers.
//!
//! An upstream's progress reports and log messages about a request come in order on the wire,
//! and before that request's answer; a client must get them in that order: the last report of
//! a tool that returns right after it must not arrive after the result, nor be dropped because
//! the call had ended (its progress route gone) by the time it was relayed, nor overtake the
//! report before it (a report that does not advance is not sent). rmcp hands each notification
//! to the client handler as a task of its own, so nothing keeps those relays in order. The
//! aggregator does:
//!
//! - The upstream's transport is wrapped ([`Ordered`]) so that each notification is numbered as
//!   it is read and marked as being handled ([`Handling`], in its extensions) until its handler
//!   has finished with it, however that ends. A request the upstream sends gets the mark of
//!   where the notifications read before it end ([`ReadAfter`]).
//! - A handler relays a notification or request only once those read before it on the same
//!   stream were handled ([`RelayOrder::turn`]): the response stream of one request over
//!   Streamable HTTP (rmcp says which, [`InboundStreamOrigin`]), or the upstream's one stream
//!   otherwise (stdio, the standalone stream). What comes on the streams of other calls does
//!   not wait.
//! - A forwarded request that has its answer waits until every notification read before it
//!   was handled ([`RelayOrder::handled`]) before it returns. That covers what was read up to
//!   the moment the answer was taken, so a few notifications read just after the answer may be
//!   waited for too; when nothing is being relayed it costs one atomic load and one look at the
//!   set.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use rmcp::model::{Extensions, GetExtensions, JsonRpcMessage, RequestId};
use rmcp::service::{InboundStreamOrigin, RoleClient, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use tokio::sync::watch;

/// The stream a message came on: a request's response stream, or `None` for the upstream's
/// other one (stdio, or the standalone stream).
type Stream = Option<RequestId>;

fn stream_of(extensions: &Extensions) -> Stream {
    match extensions.get::<InboundStreamOrigin>() {
        Some(InboundStreamOrigin::OutboundRequest(id)) => Some(id.clone()),
        _ => None,
    }
}

/// The notifications read from one upstream whose handling has not finished, by the number
/// they were read under, with the stream each came on.
#[derive(Debug)]
pub(super) struct RelayOrder {
    next: AtomicU64,
    handling: watch::Sender<BTreeMap<u64, Stream>>,
}

impl RelayOrder {
    pub(super) fn new() -> Arc<Self> {
        Arc::new(Self {
            next: AtomicU64::new(0),
            handling: watch::Sender::new(BTreeMap::new()),
        })
    }

    /// Numbers a notification just read on `stream` and marks it as being handled until the
    /// returned mark (and every clone of it) is dropped.
    fn read(self: &Arc<Self>, stream: Stream) -> Handling {
        let seq = self.next.fetch_add(1, Ordering::SeqCst);
        self.handling.send_modify(|s| {
            s.insert(seq, stream.clone());
        });
        Handling(Arc::new(Seq {
            order: Arc::clone(self),
            seq,
            stream,
        }))
    }

    /// Where the notifications read so far end: [`RelayOrder::handled`] with this waits for all
    /// of them.
    pub(super) fn mark(&self) -> u64 {
        self.next.load(Ordering::SeqCst)
    }

    /// Waits until every notification read before `mark` has been handled.
    pub(super) async fn handled(&self, mark: u64) {
        self.wait(|s| s.first_key_value().is_none_or(|(first, _)| *first >= mark))
            .await;
    }

    /// Waits until the notifications read before the message whose extensions these are, on
    /// its stream, have been handled. A message the wrapper did not see returns at once.
    pub(super) async fn turn(&self, extensions: &Extensions) {
        let (before, stream) = if let Some(Handling(seq)) = extensions.get::<Handling>() {
            (seq.seq, &seq.stream)
        } else if let Some(read) = extensions.get::<ReadAfter>() {
            (read.mark, &read.stream)
        } else {
            return;
        };
        self.wait(|s| !s.range(..before).any(|(_, on)| on == stream))
            .await;
    }

    async fn wait(&self, done: impl Fn(&BTreeMap<u64, Stream>) -> bool) {
        if done(&self.handling.borrow()) {
            return;
        }
        let mut handling = self.handling.subscribe();
        // The sender lives as long as `self`: the wait cannot fail.
        let _ = handling.wait_for(|s| done(s)).await;
    }
}

/// One notification's mark, in its extensions (and, once rmcp moves them there, in the
/// context its handler gets): handled once the last clone is dropped.
#[derive(Clone, Debug)]
pub(super) struct Handling(Arc<Seq>);

#[derive(Debug)]
struct Seq {
    order: Arc<RelayOrder>,
    seq: u64,
    stream: Stream,
}

impl Drop for Seq {
    fn drop(&mut self) {
        self.order.handling.send_modify(|s| {
            s.remove(&self.seq);
        });
    }
}

/// In the extensions of a request the upstream sent: where the notifications read before it
/// end, and the stream it came on.
#[derive(Clone, Debug)]
pub(super) struct ReadAfter {
    mark: u64,
    stream: Stream,
}

/// An upstream's transport that marks each notification it reads ([`RelayOrder`]); everything
/// else passes through unchanged.
pub(super) struct Ordered<T> {
    inner: T,
    order: Arc<RelayOrder>,
}

impl<T> Ordered<T> {
    pub(super) fn new(inner: T, order: Arc<RelayOrder>) -> Self {
        Self { inner, order }
    }
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for Ordered<T> {
    type Error = T::Error;

    fn name() -> Cow<'static, str> {
        T::name()
    }

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        let mut message = self.inner.receive().await?;
        match &mut message {
            JsonRpcMessage::Notification(n) => {
                let stream = stream_of(n.notification.extensions());
                let mark = self.order.read(stream);
                n.notification.extensions_mut().insert(mark);
            }
            JsonRpcMessage::Request(r) => {
                let read = ReadAfter {
                    mark: self.order.mark(),
                    stream: stream_of(r.request.extensions()),
                };
                r.request.extensions_mut().insert(read);
            }
            _ => {}
        }
        Some(message)
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn on(stream: Option<i64>) -> Stream {
        stream.map(RequestId::Number)
    }

    fn extensions_of(mark: &Handling) -> Extensions {
        let mut e = Extensions::new();
        e.insert(mark.clone());
        e
    }

    #[tokio::test]
    async fn an_answer_waits_only_for_the_notifications_read_before_it() {
        let order = RelayOrder::new();
        let first = order.read(on(None));
        let mark = order.mark();
        let later = order.read(on(None));
        let copy = first.clone();
        drop(first);
        // A clone still holds the first one: not handled yet.
        let wait = order.handled(mark);
        tokio::pin!(wait);
        assert!(futures::poll!(wait.as_mut()).is_pending());
        drop(copy);
        // The one read after the mark does not hold the answer back.
        wait.await;
        assert_eq!(order.handling.borrow().len(), 1);
        drop(later);
        assert!(order.handling.borrow().is_empty());
        order.handled(order.mark()).await;
    }

    #[tokio::test]
    async fn a_message_waits_for_those_before_it_on_its_own_stream_only() {
        let order = RelayOrder::new();
        let a1 = order.read(on(Some(1)));
        let b1 = order.read(on(Some(2)));
        let a2 = order.read(on(Some(1)));
        // The second on stream 1 waits for the first on it.
        {
            let ext = extensions_of(&a2);
            let wait = order.turn(&ext);
            tokio::pin!(wait);
            assert!(futures::poll!(wait.as_mut()).is_pending());
            // Stream 2's first does not wait for stream 1's.
            order.turn(&extensions_of(&b1)).await;
            drop(b1);
            assert!(futures::poll!(wait.as_mut()).is_pending());
            drop(a1);
            wait.await;
        }
        // A request read after both waits for the one still being handled on its stream.
        let mut request = Extensions::new();
        request.insert(ReadAfter {
            mark: order.mark(),
            stream: on(Some(1)),
        });
        let wait = order.turn(&request);
        tokio::pin!(wait);
        assert!(futures::poll!(wait.as_mut()).is_pending());
        drop(a2);
        wait.await;
        // One the wrapper never saw does not wait.
        let _held = order.read(on(None));
        order.turn(&Extensions::new()).await;
    }
}
