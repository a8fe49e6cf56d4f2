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
//! - The upstream's transport is wrapped ([`Ordered`]) so that each notification, as it is
//!   read, is marked ([`Handling`], in its extensions) with a signal that fires once its handler
//!   has dispatched it (taken its place in the line of the client it goes to, or found it goes
//!   nowhere), however that ends, and the one read before it on the same stream is done too; it
//!   also carries the signal of that one before it. A request the upstream sends carries the
//!   signal of the notification read last before it on its stream ([`ReadAfter`]).
//! - A handler dispatches a notification or request only once the one before it on the same
//!   stream is done ([`RelayOrder::turn`]), which is done only once all before it are: the
//!   response stream of one request over Streamable HTTP (rmcp says which,
//!   [`InboundStreamOrigin`]), or the upstream's one stream otherwise (stdio, the standalone
//!   stream). What comes on the streams of other calls does not wait. Each waits for one
//!   signal, so a flood of thousands of notifications costs one wake-up each.
//! - What goes to one client is delivered in the order it was dispatched: each relay waits for
//!   the one before it to that client to be delivered ([`RelayOrder::to_client`]), and a
//!   request relayed to it for all before ([`RelayOrder::delivered`]). Only that waits on the
//!   client's send, so a client that stops reading holds up what goes to it, never what goes to
//!   the others, though their messages came on the same stream.
//! - A forwarded request that has its answer waits until the last notification read on each
//!   stream is dispatched ([`RelayOrder::handled`]), then until what was relayed to its own
//!   client is delivered, before it returns. That covers what was read up to the moment the
//!   answer was taken, so a few notifications read just after the answer may be waited for
//!   too; when nothing is being relayed it costs two uncontended locks.

use std::borrow::Cow;
use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard};

use kberg_core::ClientPeer;
use rmcp::model::{Extensions, GetExtensions, JsonRpcMessage, RequestId};
use rmcp::service::{InboundStreamOrigin, RoleClient, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use tokio_util::sync::CancellationToken;

/// The stream a message came on: a request's response stream, or `None` for the upstream's
/// other one (stdio, or the standalone stream).
type Stream = Option<RequestId>;

fn stream_of(extensions: &Extensions) -> Stream {
    match extensions.get::<InboundStreamOrigin>() {
        Some(InboundStreamOrigin::OutboundRequest(id)) => Some(id.clone()),
        _ => None,
    }
}

/// A client channel, by the address of what it points to: the one line of what is relayed to
/// it. (An address reused by a later channel only puts that one behind what is left of the
/// earlier one's line, which ends.)
type Client = usize;

fn client_of(peer: &Arc<dyn ClientPeer>) -> Client {
    Arc::as_ptr(peer).cast::<()>().addr()
}

/// Past this many lines with a message on record, those whose last one is done are forgotten
/// (each request's response stream is one, each calling client's channel another).
const PRUNE_AT: usize = 64;

/// Lines of messages by key, each by the done signal of the last place taken on it (fired once
/// it and every one before it on that line are done).
#[derive(Debug)]
struct Lines<K> {
    last: Mutex<HashMap<K, CancellationToken>>,
}

impl<K> Default for Lines<K> {
    fn default() -> Self {
        Self {
            last: Mutex::new(HashMap::new()),
        }
    }
}

impl<K: Eq + Hash> Lines<K> {
    fn lock(&self) -> MutexGuard<'_, HashMap<K, CancellationToken>> {
        // Plain inserts and removes: consistent after any panic.
        self.last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The next place on `key`'s line: done once dropped and the one before it is done.
    fn take(&self, key: K) -> Seq {
        let done = CancellationToken::new();
        let prev = {
            let mut last = self.lock();
            if last.len() >= PRUNE_AT {
                last.retain(|_, t| !t.is_cancelled());
            }
            last.insert(key, done.clone())
        };
        Seq {
            prev: prev.filter(|p| !p.is_cancelled()),
            done,
        }
    }

    /// The done signal of the last place taken on `key`'s line, if it is not done yet.
    fn pending(&self, key: &K) -> Option<CancellationToken> {
        self.lock().get(key).filter(|t| !t.is_cancelled()).cloned()
    }

    /// The done signals of the last places of every line not done yet.
    fn all_pending(&self) -> Vec<CancellationToken> {
        let mut last = self.lock();
        last.retain(|_, t| !t.is_cancelled());
        last.values().cloned().collect()
    }
}

/// The order of one upstream's messages: the line of each stream they are read on, and the
/// line of each client they are relayed to.
#[derive(Debug, Default)]
pub(super) struct RelayOrder {
    /// Done once a notification, and all read before it on its stream, were dispatched.
    streams: Lines<Stream>,
    /// Done once a relay to a client, and all before it to that client, were delivered.
    clients: Lines<Client>,
}

impl RelayOrder {
    pub(super) fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Marks a notification just read on `stream` as being handled until it is dispatched
    /// ([`RelayOrder::dispatched`]) or the returned mark (and every clone of it) is dropped.
    fn read(&self, stream: Stream) -> Handling {
        Handling(Arc::new(self.streams.take(stream)))
    }

    /// The done signal of the last notification read on `stream`, if it is not done yet.
    fn pending_on(&self, stream: &Stream) -> Option<CancellationToken> {
        self.streams.pending(stream)
    }

    /// Waits until every notification read so far has been dispatched: taken its place in the
    /// line of the client it goes to, or found to go nowhere.
    pub(super) async fn handled(&self) {
        for t in self.streams.all_pending() {
            t.cancelled().await;
        }
    }

    /// Waits until the notifications read before the message whose extensions these are, on
    /// its stream, have been dispatched. A message the wrapper did not see returns at once.
    pub(super) async fn turn(&self, extensions: &Extensions) {
        let before = if let Some(Handling(seq)) = extensions.get::<Handling>() {
            seq.prev.as_ref()
        } else if let Some(read) = extensions.get::<ReadAfter>() {
            read.after.as_ref()
        } else {
            None
        };
        if let Some(before) = before {
            before.cancelled().await;
        }
    }

    /// Says that the notification whose extensions these are has been dispatched, after its
    /// [`RelayOrder::turn`]: the one read after it on its stream may go. (Its handler ending
    /// says the same.)
    pub(super) fn dispatched(&self, extensions: &mut Extensions) {
        extensions.remove::<Handling>();
    }

    /// Takes the next place in the line of what is relayed to `peer`: the relay waits for
    /// [`Delivery::ready`], and is done (for those after it) once the place is dropped.
    pub(super) fn to_client(&self, peer: &Arc<dyn ClientPeer>) -> Delivery {
        Delivery(self.clients.take(client_of(peer)))
    }

    /// Waits until everything relayed to `peer` so far has been delivered.
    pub(super) async fn delivered(&self, peer: &Arc<dyn ClientPeer>) {
        if let Some(t) = self.clients.pending(&client_of(peer)) {
            t.cancelled().await;
        }
    }
}

/// A relay's place in the line of its client ([`RelayOrder::to_client`]).
#[derive(Debug)]
pub(super) struct Delivery(Seq);

impl Delivery {
    /// Waits until what was relayed to the client before this has been delivered.
    pub(super) async fn ready(&self) {
        if let Some(prev) = &self.0.prev {
            prev.cancelled().await;
        }
    }
}

/// One notification's mark, in its extensions (and, once rmcp moves them there, in the
/// context its handler gets): dispatched once the last clone is dropped.
#[derive(Clone, Debug)]
pub(super) struct Handling(Arc<Seq>);

#[derive(Debug)]
struct Seq {
    /// The done signal of the one before it on its line, when that was not done yet.
    prev: Option<CancellationToken>,
    done: CancellationToken,
}

impl Drop for Seq {
    fn drop(&mut self) {
        // Done only once the one before is: a handler that did not wait its turn (a list
        // change, a relay whose task was dropped) may finish first, and the one after it must
        // still wait for all before.
        match self.prev.take() {
            Some(prev) if !prev.is_cancelled() => {
                // Fired when the wait ends, or when its task is dropped without having run to
                // the end (its runtime shut down): a signal nobody can fire any more would hold
                // every answer after it until its call's timeout.
                let done = DoneOnDrop(self.done.clone());
                match tokio::runtime::Handle::try_current() {
                    Ok(runtime) => {
                        runtime.spawn(async move {
                            prev.cancelled().await;
                            drop(done);
                        });
                    }
                    // Dropped outside a runtime (the connection is gone): nothing waits.
                    Err(_) => drop(done),
                }
            }
            _ => self.done.cancel(),
        }
    }
}

/// Fires a done signal when dropped.
struct DoneOnDrop(CancellationToken);

impl Drop for DoneOnDrop {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

/// In the extensions of a request the upstream sent: the done signal of the notification read
/// last before it on its stream, when that was not done yet.
#[derive(Clone, Debug)]
pub(super) struct ReadAfter {
    after: Option<CancellationToken>,
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
                    after: self.order.pending_on(&stream_of(r.request.extensions())),
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
    async fn an_answer_waits_for_the_notifications_read_before_it() {
        let order = RelayOrder::new();
        let first = order.read(on(None));
        let copy = first.clone();
        drop(first);
        // A clone still holds it: not handled yet.
        {
            let wait = order.handled();
            tokio::pin!(wait);
            assert!(futures::poll!(wait.as_mut()).is_pending());
            drop(copy);
            wait.await;
        }
        // One read later holds back only an answer taken after it.
        let later = order.read(on(Some(7)));
        {
            let wait = order.handled();
            tokio::pin!(wait);
            assert!(futures::poll!(wait.as_mut()).is_pending());
            drop(later);
            wait.await;
        }
        assert!(order.streams.all_pending().is_empty());
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
            after: order.pending_on(&on(Some(1))),
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

    /// A client channel that is never used.
    struct Nobody(#[allow(dead_code)] u8);

    #[async_trait::async_trait]
    impl ClientPeer for Nobody {
        async fn notify(
            &self,
            _method: &str,
            _params: serde_json::Value,
        ) -> Result<(), kberg_core::PeerError> {
            Ok(())
        }
        async fn request(
            &self,
            method: &str,
            _params: serde_json::Value,
            _cancel: CancellationToken,
        ) -> Result<serde_json::Value, kberg_core::PeerError> {
            Err(kberg_core::PeerError::NotSupported(method.to_string()))
        }
        fn supports(&self, _capability: &str) -> bool {
            false
        }
    }

    /// A relay waits for those before it to the same client only, and a dispatched notification
    /// lets the next one on its stream go while its relay still waits.
    #[tokio::test]
    async fn a_relay_waits_for_what_went_to_its_own_client_only() {
        let order = RelayOrder::new();
        let a: Arc<dyn ClientPeer> = Arc::new(Nobody(0));
        let b: Arc<dyn ClientPeer> = Arc::new(Nobody(0));
        // Two notifications on one stream, the first for a client that stopped reading.
        let first = order.read(on(None));
        let second = order.read(on(None));
        let mut first_ext = extensions_of(&first);
        drop(first);
        let to_a = order.to_client(&a);
        to_a.ready().await;
        order.dispatched(&mut first_ext);
        // Its relay is not delivered, yet the second is dispatched and delivered to b.
        order.turn(&extensions_of(&second)).await;
        let to_b = order.to_client(&b);
        to_b.ready().await;
        drop(second);
        order.handled().await;
        {
            let wait = order.delivered(&b);
            tokio::pin!(wait);
            assert!(futures::poll!(wait.as_mut()).is_pending());
            drop(to_b);
            wait.await;
        }
        // The next relay to a waits for the one before it, and so does a's answer.
        let again_a = order.to_client(&a);
        {
            let ready = again_a.ready();
            tokio::pin!(ready);
            assert!(futures::poll!(ready.as_mut()).is_pending());
            let wait = order.delivered(&a);
            tokio::pin!(wait);
            assert!(futures::poll!(wait.as_mut()).is_pending());
            drop(to_a);
            ready.await;
            assert!(futures::poll!(wait.as_mut()).is_pending());
        }
        drop(again_a);
        order.delivered(&a).await;
    }

    /// A place dropped before the one before it waits for that one on a task; a runtime that
    /// ends before that task ran (an upstream thread shutting down) still leaves it done, so
    /// nothing waits for it until a call's timeout.
    #[test]
    fn a_wait_cut_short_by_its_runtime_ending_is_done() {
        let order = RelayOrder::new();
        let first = order.read(on(None));
        let second = order.read(on(None));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime");
        runtime.block_on(async move { drop(second) });
        drop(runtime);
        drop(first);
        assert!(order.streams.all_pending().is_empty());
    }

    /// A notification whose handler finished before the one read before it (a handler that
    /// does not wait its turn) is done only once that one is: the one after both still waits.
    #[tokio::test]
    async fn done_means_done_with_all_before_it() {
        let order = RelayOrder::new();
        let first = order.read(on(None));
        let second = order.read(on(None));
        let third = order.read(on(None));
        drop(second);
        let ext = extensions_of(&third);
        let wait = order.turn(&ext);
        tokio::pin!(wait);
        assert!(futures::poll!(wait.as_mut()).is_pending());
        drop(first);
        wait.await;
    }
}
