//! Prompt formats of the Qwen family: ChatML for chat, `<|fim_*|>` for fill-in-the-middle.

/// Who speaks a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Message {
    pub role: Role,
    pub content: String,
}

impl Message {
    pub fn system(content: impl Into<String>) -> Self {
        Self {
            role: Role::System,
            content: content.into(),
        }
    }
    pub fn user(content: impl Into<String>) -> Self {
        Self {
            role: Role::User,
            content: content.into(),
        }
    }
    pub fn assistant(content: impl Into<String>) -> Self {
        Self {
            role: Role::Assistant,
            content: content.into(),
        }
    }
}

impl Role {
    fn tag(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
        }
    }
}

/// Renders `messages` as ChatML and opens the assistant turn. `default_system` is inserted
/// first when the messages have no system message (Qwen2.5's template does this; Qwen3's
/// does not).
pub fn chatml(messages: &[Message], default_system: Option<&str>) -> String {
    let mut out = String::new();
    if let Some(sys) = default_system.filter(|_| !messages.iter().any(|m| m.role == Role::System)) {
        out.push_str(&format!("<|im_start|>system\n{sys}<|im_end|>\n"));
    }
    for m in messages {
        out.push_str(&format!(
            "<|im_start|>{}\n{}<|im_end|>\n",
            m.role.tag(),
            m.content
        ));
    }
    out.push_str("<|im_start|>assistant\n");
    out
}

/// Fill-in-the-middle prompt (prefix-suffix-middle order, as Qwen2.5-Coder was trained).
pub fn fim_prompt(prefix: &str, suffix: &str) -> String {
    format!("<|fim_prefix|>{prefix}<|fim_suffix|>{suffix}<|fim_middle|>")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chatml_inserts_default_system_only_when_absent() {
        let plain = chatml(&[Message::user("hi")], Some("S"));
        assert_eq!(
            plain,
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
        );
        let own = chatml(&[Message::system("X"), Message::user("hi")], Some("S"));
        assert_eq!(
            own,
            "<|im_start|>system\nX<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
        );
    }

    #[test]
    fn fim_order_is_prefix_suffix_middle() {
        assert_eq!(
            fim_prompt("a(", ")\n"),
            "<|fim_prefix|>a(<|fim_suffix|>)\n<|fim_middle|>"
        );
    }
}
