//! The gRPC codec of the generated service: prost's, with smaller first buffers ([`GRPC_CODEC_BUFFER_BYTES`]).
//! `build.rs` names it as the generated code's codec.

use std::marker::PhantomData;

use prost::Message;
use tonic::codec::{BufferSettings, Codec, ProstCodec};

use crate::limits::GRPC_CODEC_BUFFER_BYTES;

/// tonic's default: how much encoded response data a stream gathers before it hands a batch to HTTP/2.
const YIELD_THRESHOLD_BYTES: usize = 32 * 1_024;

/// [`tonic::codec::ProstCodec`] with [`GRPC_CODEC_BUFFER_BYTES`] first buffers.
#[derive(Debug)]
pub struct LeanCodec<T, U>(PhantomData<(T, U)>);

impl<T, U> Default for LeanCodec<T, U> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

fn settings() -> BufferSettings {
    BufferSettings::new(GRPC_CODEC_BUFFER_BYTES, YIELD_THRESHOLD_BYTES)
}

impl<T, U> Codec for LeanCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = <ProstCodec<T, U> as Codec>::Encoder;
    type Decoder = <ProstCodec<T, U> as Codec>::Decoder;

    fn encoder(&mut self) -> Self::Encoder {
        ProstCodec::<T, U>::raw_encoder(settings())
    }

    fn decoder(&mut self) -> Self::Decoder {
        ProstCodec::<T, U>::raw_decoder(settings())
    }
}
