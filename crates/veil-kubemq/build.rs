//! Compiles `proto/kubemq.proto` with the pure-Rust `protox` parser feeding `tonic-build`, so that a fresh
//! machine builds Veil without a system `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/kubemq.proto");
    let descriptors = protox::compile(["proto/kubemq.proto"], ["proto"])?;
    tonic_build::configure()
        // `bytes` fields as `bytes::Bytes`: a body is sliced out of the request buffer and handed to the engine
        // without a copy, and a received body goes out as another reference to the stored one.
        .bytes(["."])
        // Prost's codec with small first buffers: a waiting stream keeps two of them (src/codec.rs).
        .codec_path("crate::codec::LeanCodec")
        .build_client(true)
        .build_server(true)
        .compile_fds(descriptors)?;
    Ok(())
}
