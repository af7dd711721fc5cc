//! `view_file` over MCP sends an image's pixels, not its metadata: a PNG
//! whose `tEXt` and (compressed) `zTXt` chunks hold a registered secret
//! comes back as an image block whose base64 decodes to a PNG with neither
//! chunk and no trace of the secret (red-team pass 2, N5). The control: the
//! file on disk holds the secret in both chunks.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use base64::Engine as _;
use cubby_mcp::{McpOptions, serve_stdio};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

/// The registered secret (`secrets = ["IMAGE_TEST_TOKEN"]`).
const SECRET: &str = "sk-live-image-metadata-5e1f02c7a9";
/// Longest wait for one answer.
const ANSWER_WAIT: Duration = Duration::from_secs(60);

/// A 4×4 RGB PNG with the secret in a `tEXt` and a `zTXt` chunk.
fn png_with_secret() -> Vec<u8> {
    let mut out = Vec::new();
    let mut encoder = png::Encoder::new(&mut out, 4, 4);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    encoder
        .add_text_chunk("Comment".into(), SECRET.into())
        .unwrap();
    encoder
        .add_ztxt_chunk("Secret".into(), SECRET.into())
        .unwrap();
    let mut writer = encoder.write_header().unwrap();
    let pixels: Vec<u8> = (0..48u8).map(|i| i.wrapping_mul(5)).collect();
    writer.write_image_data(&pixels).unwrap();
    writer.finish().unwrap();
    out
}

/// Every text a PNG's metadata chunks hold, the compressed ones inflated.
fn texts(png_bytes: &[u8]) -> Vec<String> {
    let reader = png::Decoder::new(std::io::Cursor::new(png_bytes))
        .read_info()
        .unwrap();
    let info = reader.info();
    let mut out: Vec<String> = info
        .uncompressed_latin1_text
        .iter()
        .map(|t| t.text.clone())
        .collect();
    out.extend(
        info.compressed_latin1_text
            .iter()
            .map(|z| z.get_text().unwrap()),
    );
    out
}

async fn ask(
    input: &mut tokio::io::DuplexStream,
    output: &mut BufReader<tokio::io::DuplexStream>,
    message: Value,
) -> Value {
    let mut line = message.to_string().into_bytes();
    line.push(b'\n');
    input.write_all(&line).await.unwrap();
    let mut answer = String::new();
    loop {
        answer.clear();
        let n = tokio::time::timeout(ANSWER_WAIT, output.read_line(&mut answer))
            .await
            .expect("an answer in time")
            .unwrap();
        assert!(n > 0, "the server ended before answering {message}");
        let value: Value = serde_json::from_str(&answer).unwrap();
        if value["id"] == message["id"] {
            return value;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn view_file_sends_no_image_metadata_over_mcp() {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let file = png_with_secret();
    std::fs::write(root.join("shot.png"), &file).unwrap();
    // Control: the file holds the secret in both chunks (the zTXt one
    // compressed, invisible to a byte scan).
    assert_eq!(texts(&file), vec![SECRET.to_string(), SECRET.to_string()]);
    let config = cubby::Config {
        provider: Some(cubby::ProviderKind::Local),
        secrets: vec!["IMAGE_TEST_TOKEN".into()],
        ..cubby::Config::default()
    };
    let host = cubby::HostEnv::capture().with("IMAGE_TEST_TOKEN", SECRET);
    let factory = cubby::Workspace::from_config(&root, &config, None, &host)
        .unwrap()
        .factory(true)
        .unwrap();
    let (mut input, server_in) = tokio::io::duplex(1 << 20);
    let (server_out, output) = tokio::io::duplex(1 << 20);
    let server = tokio::spawn(serve_stdio(
        factory,
        McpOptions::default(),
        server_in,
        server_out,
    ));
    let mut output = BufReader::new(output);
    let init = json!({"jsonrpc": "2.0", "id": "init", "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "image-metadata", "version": "1"}}});
    ask(&mut input, &mut output, init).await;
    input
        .write_all(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n")
        .await
        .unwrap();
    let call = json!({"jsonrpc": "2.0", "id": "view", "method": "tools/call",
        "params": {"name": "view_file", "arguments": {"path": "shot.png"}}});
    let answer = ask(&mut input, &mut output, call).await;
    let content = answer["result"]["content"].as_array().unwrap();
    let image = content
        .iter()
        .find(|block| block["type"] == "image")
        .unwrap_or_else(|| panic!("no image block: {answer}"));
    assert_eq!(image["mimeType"], "image/png");
    let sent = base64::engine::general_purpose::STANDARD
        .decode(image["data"].as_str().unwrap())
        .unwrap();
    assert!(
        !sent.windows(SECRET.len()).any(|w| w == SECRET.as_bytes()),
        "the image block holds the secret"
    );
    assert_eq!(texts(&sent), Vec::<String>::new(), "metadata was sent");
    assert!(!answer.to_string().contains(SECRET), "{answer}");
    drop(input);
    let mut rest = Vec::new();
    output.read_to_end(&mut rest).await.unwrap();
    server.await.unwrap().unwrap();
}
