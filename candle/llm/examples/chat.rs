//! The chat program of docs/llm.md: `cargo run --release -p candle-rocm-llm --example chat -- FILE.gguf`.

use candle_core::quantized::gguf_file;
use candle_rocm_llm::{ChatSession, GenerateOptions, GgufText, Message, StaticLlama};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let device = candle_core::Device::new_rocm(0)?;
    let mut file = std::fs::File::open(std::env::args().nth(1).ok_or("usage: chat FILE.gguf")?)?;
    let content = gguf_file::Content::read(&mut file)?;
    let text = GgufText::from_gguf(&content)?; // tokenizer and chat template of the file
    let model = StaticLlama::from_gguf_file(&content, &file, &device, 2048)?;
    let mut session = ChatSession::new(&model, true)?; // earlier turns stay in its cache
    let mut chat = vec![Message::new("system", "You are a helpful assistant.")];
    for line in std::io::stdin().lines() {
        chat.push(Message::new("user", &line?));
        let prompt = text.chat_prompt(&chat)?;
        let options = GenerateOptions {
            stop_tokens: text.stop_tokens.clone(),
            ..Default::default()
        };
        let mut stream = text.stream();
        let reply = session.respond(&prompt, &options, |token| {
            if let Some(piece) = stream.push(token)? {
                print!("{piece}"); // streamed as each token completes a character
            }
            Ok(true)
        })?;
        println!();
        chat.push(Message::new("assistant", &text.decode(&reply.tokens)?));
    }
    Ok(())
}
