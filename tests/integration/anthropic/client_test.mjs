// Drives a colibri server's Messages API with the official `@anthropic-ai/sdk` npm client, as a
// real application would (its key goes in x-api-key).
// usage: node client_test.mjs BASE_URL API_KEY MODEL   (prints one JSON line of results)
import Anthropic from '@anthropic-ai/sdk';

const [baseURL, apiKey, model] = process.argv.slice(2);
const client = new Anthropic({ baseURL, apiKey, maxRetries: 0, timeout: 120000 });
const out = {};
const ask = { model, max_tokens: 8, temperature: 0, system: 'Be brief.',
              messages: [{ role: 'user', content: 'Tell me about the sea.' }] };

const msg = await client.messages.create(ask);
out.message = { id: msg.id, type: msg.type, role: msg.role, model: msg.model, stop_reason: msg.stop_reason,
                stop_sequence: msg.stop_sequence, usage: msg.usage,
                text: msg.content.map((b) => b.text).join(''), blocks: msg.content.map((b) => b.type) };

// Streaming through the SDK's event parser: the raw events and the assembled final message.
const stream = client.messages.stream(ask);
const events = [];
let text = '';
stream.on('streamEvent', (e) => events.push(e.type));
stream.on('text', (t) => { text += t; });
const final = await stream.finalMessage();
out.stream = { text, events, stop_reason: final.stop_reason, usage: final.usage,
               final_text: final.content.map((b) => b.text).join('') };

// A content-block list and an assistant turn.
const blocks = await client.messages.create({
  model, max_tokens: 4, temperature: 0,
  messages: [{ role: 'user', content: [{ type: 'text', text: 'Tell me about ' }, { type: 'text', text: 'the sea.' }] },
             { role: 'assistant', content: 'The sea' }, { role: 'user', content: 'More.' }],
});
out.blocks = { stop_reason: blocks.stop_reason, output_tokens: blocks.usage.output_tokens };

// The vLLM / llama-server extensions pass through the SDK's body as they are.
const long = await client.messages.create({ ...ask, max_tokens: 12, ignore_eos: true, min_tokens: 12 });
const longText = long.content.map((b) => b.text).join('');
out.ignore_eos = { stop_reason: long.stop_reason, output_tokens: long.usage.output_tokens, text: longText };
// A stop sequence taken from inside that text ends the same request there.
const chars = Array.from(longText);
const stop = chars.slice(3, 6).join('');
const cut = await client.messages.create({ ...ask, max_tokens: 12, ignore_eos: true, stop_sequences: [stop] });
out.stop = { stop, stop_reason: cut.stop_reason, stop_sequence: cut.stop_sequence,
             text: cut.content.map((b) => b.text).join('') };

for (const [name, call] of [
  ['unknown_model', () => client.messages.create({ ...ask, model: 'nope' })],
  ['bad_temperature', () => client.messages.create({ ...ask, temperature: 7 })],
  ['no_max_tokens', () => client.messages.create({ model, messages: ask.messages })],
  ['bad_min_tokens', () => client.messages.create({ ...ask, max_tokens: 4, min_tokens: 5 })],
  ['image', () => client.messages.create({ ...ask, messages: [{ role: 'user', content: [
    { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'AAAA' } }] }] })],
  ['bad_key', () => new Anthropic({ baseURL, apiKey: 'wrong', maxRetries: 0 }).messages.create(ask)],
]) {
  try {
    await call();
    out[name] = 'no error';
  } catch (e) {
    out[name] = { status: e.status, type: e.error?.error?.type, message: e.error?.error?.message ?? e.message };
  }
}
console.log(JSON.stringify(out));
