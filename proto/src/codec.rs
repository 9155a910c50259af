//! The gRPC codec of every generated service and client: tonic-prost's,
//! except for what a message that cannot be decoded is answered with.
//!
//! tonic-prost answers a message prost refuses (malformed bytes, or
//! nesting past prost's recursion limit of 100 message levels, which an
//! etcd Txn reaches at about 50 levels) with `Internal`, as gRPC's status
//! code guide suggests. For a server, though, such a message is the
//! client's mistake, and `Internal` tells operators and clients that the
//! server is broken; it is answered `InvalidArgument` instead, as a Txn
//! nested past kubestore's own limit is. Encoding is unchanged.
//! `tests/tests/fuzz.rs` sends such Txns to a live node.

use std::marker::PhantomData;

use prost::Message;
use tonic::codec::{BufferSettings, DecodeBuf, Decoder};
use tonic::Status;
use tonic_prost::{ProstCodec, ProstDecoder};

/// tonic-prost's codec with undecodable messages answered `InvalidArgument`.
#[derive(Debug, Clone)]
pub struct Codec<T, U> {
    inner: ProstCodec<T, U>,
    _pd: PhantomData<(T, U)>,
}

impl<T, U> Default for Codec<T, U> {
    fn default() -> Self {
        Self {
            inner: ProstCodec::default(),
            _pd: PhantomData,
        }
    }
}

impl<T, U> tonic::codec::Codec for Codec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = <ProstCodec<T, U> as tonic::codec::Codec>::Encoder;
    type Decoder = InvalidArgumentDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        tonic::codec::Codec::encoder(&mut self.inner)
    }

    fn decoder(&mut self) -> Self::Decoder {
        InvalidArgumentDecoder(tonic::codec::Codec::decoder(&mut self.inner))
    }
}

/// Decodes as tonic-prost does; a message it cannot decode is
/// `InvalidArgument`.
#[derive(Debug, Clone)]
pub struct InvalidArgumentDecoder<U>(ProstDecoder<U>);

impl<U: Message + Default> Decoder for InvalidArgumentDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        self.0.decode(buf).map_err(|s| {
            Status::invalid_argument(format!("the message could not be decoded: {}", s.message()))
        })
    }

    fn buffer_settings(&self) -> BufferSettings {
        self.0.buffer_settings()
    }
}
