//! Compiles `proto/cluster.proto` with the pure-Rust `protox` parser feeding `tonic-build`, as veil-kubemq
//! does, so that a fresh machine builds Veil without a system `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/cluster.proto");
    let descriptors = protox::compile(["proto/cluster.proto"], ["proto"])?;
    tonic_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(descriptors)?;
    Ok(())
}
