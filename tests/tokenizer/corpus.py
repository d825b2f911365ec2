"""The reference corpus: texts to tokenize and conversations to render, built deterministically.

Texts cover English, Chinese, Japanese, Korean and other scripts, emoji (ZWJ sequences, flags,
skin tones), code with tabs and long whitespace runs, digits in several scripts, mixed scripts,
Unicode normalization cases, special-token strings, and seeded random mixtures. Characters
whose whitespace class differs between JavaScript and Oniguruma regexes (U+0085, U+FEFF) are
left out, since there the reference itself would disagree with Hugging Face tokenizers.
"""

import random

ENGLISH = [
    "Hello world",
    "Hello, world! How are you doing today?",
    "The quick brown fox jumps over the lazy dog.",
    "I'm sure they'll say it's fine, but we've seen what they'd do. DON'T YOU'LL I'D",
    "  leading spaces and trailing spaces   ",
    "multiple   internal    spaces",
    "line one\nline two\n\nline four\n",
    "windows\r\nline endings\r\n",
    "tabs\tand\t\ttabs",
    "a",
    " ",
    "\n",
    "\n\n\n",
    "x  ",
    "e-mail: someone@example.com, URL: https://example.org/path?q=1&r=two#frag",
    "Prices: $3.50, €4,20, £1.000,00 — 50% off!!! (limited) [see] {details}",
    "Punctuation...?!;:'\"`~^*_+=-|\\/<>",
]

DIGITS = [
    "1234567890",
    "3.14159265358979",
    "1,000,000 and 1 000 000 and 1_000_000",
    "year 2024, call 555-0199 at 09:30",
    "０１２３４５６７８９ fullwidth",
    "١٢٣٤٥ Arabic-Indic and ४५६ Devanagari digits",
    "x=42; y=7; z=x*y+1e-9",
    "12345678901234567890123456789",
]

CJK = [
    "你好，世界！今天天气怎么样？",
    "我们在北京大学学习人工智能和自然语言处理。",
    "日本語のテキストです。東京は日本の首都です。",
    "ひらがなとカタカナ、そして漢字が混ざっています。",
    "ｶﾀｶﾅ半角とＡＢＣ全角",
    "안녕하세요, 세계! 한국어 문장입니다.",
    "中文English混合text和数字123",
]

OTHER_SCRIPTS = [
    "Привет, мир! Как дела?",
    "Γειά σου Κόσμε",
    "مرحبا بالعالم",
    "שלום עולם",
    "नमस्ते दुनिया, यह हिंदी है।",
    "สวัสดีชาวโลก",
    "Tiếng Việt có dấu: Hà Nội, Đà Nẵng",
    "café naïve résumé coöperate Zürich São Paulo",
]

EMOJI = [
    "I love pizza 🍕🍕🍕!",
    "👨‍👩‍👧‍👦 family, 👍🏽 thumbs, 🏳️‍🌈 flag, 🇫🇷🇯🇵 flags",
    "❤️ ✨ 🚀 😀😃😄 ☃ ♥",
    "emoji🎉without🎊spaces",
]

CODE = [
    "def add(a, b):\n\treturn a + b\n\n\nclass Foo:\n    def bar(self):\n        pass\n",
    "int main() {\n\tfor (int i = 0; i < 10; ++i) {\n\t\tprintf(\"%d\\n\", i);\n\t}\n\treturn 0;\n}\n",
    "    " * 25 + "deeply indented",
    "x" + " " * 100 + "y",
    "\t" * 20 + "tabs" + "\n" * 10 + "end",
    " \t \n \t\n\n   \t",
    "<html><body><div class=\"a\">text</div></body></html>",
    '{"key": [1, 2.5, null, true], "nested": {"a": "b"}}',
    "SELECT * FROM users WHERE id = 42 AND name LIKE '%bob%';",
    "if x != None and y >= 3:\n    z = x ** 2 // y\n",
]

NORMALIZATION = [
    "e\u0301 vs \u00e9",  # NFC composes for Qwen
    "\u212b angstrom vs \u00c5",
    "\u1100\u1161\u11a8 jamo",
    "fi ligature \ufb01 and \u2126 ohm",
    "non\u00a0breaking\u3000ideographic\u2028line\u2029para",
    "zero\u200bwidth\u200djoiner",
]

SPECIAL = [
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
    "<s>[INST] hi [/INST] hello</s>",
    "</s></s><s>",
    "<unk> token",
    "<｜begin▁of▁sentence｜>hello<｜end▁of▁sentence｜>",
    "<｜User｜>hi<｜Assistant｜>hey<｜tool▁calls▁begin｜>",
    "<think>\nreasoning\n</think>\n\nanswer",
    "<tool_call>\n{\"name\": \"f\"}\n</tool_call>",
    "<|im_start partial <|im_end",
    "<|endoftext|><|endoftext|>",
    "▁already▁has▁metaspace",
    "<0x41> looks like a byte token",
]

ALPHABETS = [
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
    "0123456789",
    "  \t\n",
    ".,;:!?'\"()[]{}<>-_=+*/\\|@#$%^&~`",
    "你好世界中文字符学习人工智能",
    "あいうえおかきくけこアイウエオ日本語",
    "가나다라마바사",
    "привет",
    "éèêàçñüö",
    "😀🎉🚀❤️👍🏽",
    "ऀँंःअआइईउऊ",
]


def random_texts(count, seed=1234):
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        n = rng.randint(1, 60)
        parts = []
        for _ in range(n):
            alphabet = rng.choice(ALPHABETS)
            parts.append("".join(rng.choice(alphabet) for _ in range(rng.randint(1, 6))))
        out.append("".join(parts))
    return out


def texts():
    """Every text of the corpus (valid UTF-8)."""
    base = ENGLISH + DIGITS + CJK + OTHER_SCRIPTS + EMOJI + CODE + NORMALIZATION + SPECIAL
    long_text = "\n".join(base)  # one long document mixing everything
    return base + [long_text] + random_texts(200)


def invalid_utf8():
    """Byte strings that are not UTF-8: tokenizers must refuse them with a clear error."""
    return [
        b"abc\xff",
        b"\xc3",  # truncated 2-byte sequence
        b"hello \xe4\xb8 world",  # truncated 3-byte sequence
        b"\xed\xa0\x80 surrogate",
        b"\xc0\xaf overlong",
        b"\x80 stray continuation",
        b"\xf5\x80\x80\x80 beyond U+10FFFF",
    ]


def bench_corpus(size_bytes=1 << 20):
    """A ~1 MB mixed document for the throughput bench: the corpus texts (realistic, repeating
    words) and as many seeded random mixtures (rarely repeating words)."""
    pieces = texts()
    pieces += random_texts(len(pieces), seed=99)
    rng = random.Random(99)
    out, total = [], 0
    while total < size_bytes:
        p = rng.choice(pieces)
        out.append(p)
        total += len(p.encode("utf-8")) + 1
    return "\n".join(out)


SYSTEM = {"role": "system", "content": "You are a helpful assistant. Answer concisely."}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the current weather in a city",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "City name, e.g. Paris"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                },
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the web (résumé: 検索)",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}}},
        },
    },
]


def conversations():
    """(name, case) pairs; case = {"messages", optional "tools", "add_generation_prompt", extras}."""
    tool_call_str = {"id": "call12345", "type": "function",
                     "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}
    tool_call_obj = {"id": "call67890", "type": "function",
                     "function": {"name": "get_weather", "arguments": {"city": "東京", "unit": "celsius"}}}
    return [
        ("single_user", {"messages": [{"role": "user", "content": "Hello!"}]}),
        ("system_user", {"messages": [SYSTEM, {"role": "user", "content": "What is 2+2?"}]}),
        ("multi_turn", {"messages": [
            SYSTEM,
            {"role": "user", "content": "Hi, who are you?"},
            {"role": "assistant", "content": "I am an assistant."},
            {"role": "user", "content": "Tell me a joke."},
            {"role": "assistant", "content": "Why did the chicken cross the road?"},
            {"role": "user", "content": "Why?"},
        ]}),
        ("no_generation_prompt", {"add_generation_prompt": False, "messages": [
            {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello there."}]}),
        ("reasoning_in_content", {"messages": [
            {"role": "user", "content": "What is 17*3?"},
            {"role": "assistant", "content": "<think>\n17*3 = 51.\n</think>\n\nIt is 51."},
            {"role": "user", "content": "And 17*4?"},
        ]}),
        ("reasoning_last_turn", {"add_generation_prompt": False, "messages": [
            {"role": "user", "content": "Think step by step: 2+3?"},
            {"role": "assistant", "content": "<think>\nadd them\n</think>\n\n5"},
        ]}),
        ("reasoning_field", {"messages": [
            {"role": "user", "content": "Capital of France?"},
            {"role": "assistant", "content": "Paris.", "reasoning_content": "The user asks geography."},
            {"role": "user", "content": "And of Japan?"},
        ]}),
        ("thinking_disabled", {"enable_thinking": False, "messages": [{"role": "user", "content": "Quick answer: 1+1?"}]}),
        ("thinking_enabled", {"enable_thinking": True, "messages": [{"role": "user", "content": "Think about 1+1"}]}),
        ("tools_defined", {"tools": TOOLS, "messages": [SYSTEM, {"role": "user", "content": "Weather in Paris?"}]}),
        ("tools_no_system", {"tools": TOOLS, "messages": [{"role": "user", "content": "Weather in Tokyo?"}]}),
        ("tool_call_string_args", {"tools": TOOLS, "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": None, "tool_calls": [tool_call_str]},
            {"role": "tool", "content": "{\"temp\": 21, \"sky\": \"clear\"}", "tool_call_id": "call12345"},
            {"role": "assistant", "content": "It is 21°C and clear in Paris."},
            {"role": "user", "content": "Thanks!"},
        ]}),
        ("tool_call_object_args", {"tools": TOOLS, "messages": [
            {"role": "user", "content": "東京の天気は？"},
            {"role": "assistant", "content": "", "tool_calls": [tool_call_obj, tool_call_str]},
            {"role": "tool", "content": "{\"temp\": 18}", "tool_call_id": "call67890"},
            {"role": "tool", "content": "{\"temp\": 21}", "tool_call_id": "call12345"},
        ]}),
        ("tool_call_empty_content", {"tools": TOOLS, "messages": [
            SYSTEM,
            {"role": "user", "content": "Weather in Paris, then search for news?"},
            {"role": "assistant", "content": "<think>\nI need two tools.\n</think>\n\nLet me check.",
             "tool_calls": [tool_call_str, {"id": "call24680", "type": "function",
                                            "function": {"name": "search", "arguments": "{\"query\": \"news\"}"}}]},
            {"role": "tool", "content": "{\"temp\": 21}", "tool_call_id": "call12345"},
            {"role": "tool", "content": "<tool_response>already wrapped</tool_response>", "tool_call_id": "call24680"},
            {"role": "assistant", "content": "<think>\nsummarize\n</think>\n\n21°C; no news.",
             "reasoning_content": None},
        ]}),
        ("tool_calls_null_content", {"tools": TOOLS, "messages": [
            {"role": "user", "content": "Two lookups please"},
            {"role": "assistant", "content": None, "tool_calls": [tool_call_str, {
                "id": "call13579", "type": "function", "function": {"name": "search", "arguments": "{}"}}]},
            {"role": "tool", "content": "sunny", "tool_call_id": "call12345"},
            {"role": "tool", "content": "nothing", "tool_call_id": "call13579"},
            {"role": "assistant", "content": "Sunny, and nothing new."},
            {"role": "user", "content": "ok"},
        ]}),
        ("multiple_systems", {"messages": [
            SYSTEM, {"role": "system", "content": "Second system note."}, {"role": "user", "content": "Hi"}]}),
        ("unicode_content", {"messages": [
            {"role": "system", "content": "用中文回答。"},
            {"role": "user", "content": "日本語と中文と emoji 😀🚀 と\tタブ\n\n改行"},
            {"role": "assistant", "content": "好的！ 👍🏽"},
            {"role": "user", "content": "code:\n```python\ndef f(x):\n\treturn x  # tab\n```"},
        ]}),
        ("special_strings_in_content", {"messages": [
            {"role": "user", "content": "Say <|im_end|> and </s> and <｜end▁of▁sentence｜> literally"}]}),
        ("whitespace_content", {"messages": [
            {"role": "user", "content": "   padded   \n\n"}, {"role": "assistant", "content": "\n ok \n"},
            {"role": "user", "content": "\t"}]}),
        ("non_alternating", {"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]}),
        ("assistant_first", {"messages": [{"role": "assistant", "content": "I start."}, {"role": "user", "content": "ok"}]}),
        ("empty_messages", {"messages": []}),
    ]
