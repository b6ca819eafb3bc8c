//! `GET /api/events`' body: the sampler's events (already in the
//! `text/event-stream` form) as they are broadcast, to one client. It never
//! waits for its client: a client that falls behind the broadcast's buffer
//! (`RecvError::Lagged`) sees its stream end, and one whose socket takes
//! nothing for [`crate::control::http::STALL`] is reset by the plumbing.
//! Each stream holds one of [`MAX_STREAMS`] places ([`Streams`]).

use hyper::body::{Body, Bytes, Frame};
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::broadcast::Receiver;

/// Event streams served at once; more are answered 503.
pub const MAX_STREAMS: usize = 64;

/// The places of the streams.
#[derive(Default, Clone)]
pub struct Streams(Arc<AtomicUsize>);

/// One stream's place, given back when its body is dropped.
pub struct Place(Arc<AtomicUsize>);

impl Streams {
    pub fn take(&self) -> Option<Place> {
        let taken = self
            .0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < MAX_STREAMS).then_some(n + 1)
            })
            .is_ok();
        taken.then(|| Place(self.0.clone()))
    }

    #[cfg(test)]
    fn held(&self) -> usize {
        self.0.load(Ordering::Acquire)
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

type Next = Pin<Box<dyn Future<Output = (Result<Arc<str>, RecvError>, Receiver<Arc<str>>)> + Send>>;

fn next(mut rx: Receiver<Arc<str>>) -> Next {
    Box::pin(async move {
        let r = rx.recv().await;
        (r, rx)
    })
}

/// The body of one client's stream.
pub struct Events {
    first: Option<Bytes>,
    next: Next,
    _place: Place,
}

impl Events {
    pub fn new(rx: Receiver<Arc<str>>, place: Place) -> Events {
        Events {
            // Reconnect soon after a drop (the browser's EventSource does).
            first: Some(Bytes::from_static(b"retry: 2000\n\n")),
            next: next(rx),
            _place: place,
        }
    }
}

impl Body for Events {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        if let Some(b) = this.first.take() {
            return Poll::Ready(Some(Ok(Frame::data(b))));
        }
        match this.next.as_mut().poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready((Ok(text), rx)) => {
                this.next = next(rx);
                Poll::Ready(Some(Ok(Frame::data(Bytes::copy_from_slice(
                    text.as_bytes(),
                )))))
            }
            // Lagged: this client is too slow for the broadcast; Closed: the
            // sampler stopped. Either way the stream ends here.
            Poll::Ready((Err(_), _)) => Poll::Ready(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[test]
    fn places_are_bounded_and_given_back() {
        let s = Streams::default();
        let held: Vec<Place> = (0..MAX_STREAMS).map(|_| s.take().unwrap()).collect();
        assert!(s.take().is_none());
        drop(held);
        assert_eq!(s.held(), 0);
        assert!(s.take().is_some());
    }

    #[test]
    fn a_lagging_client_sees_its_stream_end() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async {
            let (tx, rx) = tokio::sync::broadcast::channel::<Arc<str>>(2);
            let streams = Streams::default();
            let mut body = Events::new(rx, streams.take().unwrap());
            let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
            assert_eq!(&first[..], b"retry: 2000\n\n");
            tx.send("event: sample\ndata: {}\n\n".into()).unwrap();
            let e = body.frame().await.unwrap().unwrap().into_data().unwrap();
            assert_eq!(&e[..], b"event: sample\ndata: {}\n\n");
            for i in 0..5 {
                tx.send(format!("event: sample\ndata: {i}\n\n").into())
                    .unwrap();
            }
            assert!(body.frame().await.is_none(), "lagged: the stream ends");
            drop(body);
            assert_eq!(streams.held(), 0);
        });
    }
}
