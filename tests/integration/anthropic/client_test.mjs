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

// A tool loop as an agent runs it: tools offered, the model's tool_use answered by a tool_result
// (plain and as blocks, one an error), then the next turn, whole and streamed.
const tools = [{ name: 'get_weather', description: 'The weather in a city.',
                 input_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } }];
const loop = [
  { role: 'user', content: 'What is the weather in Paris and Rome?' },
  { role: 'assistant', content: [
    { type: 'text', text: 'Let me check.' },
    { type: 'tool_use', id: 'toolu_01', name: 'get_weather', input: { city: 'Paris' } },
    { type: 'tool_use', id: 'toolu_02', name: 'get_weather', input: { city: 'Rome' } }] },
  { role: 'user', content: [
    { type: 'tool_result', tool_use_id: 'toolu_01', content: '18 C, sunny' },
    { type: 'tool_result', tool_use_id: 'toolu_02', content: [{ type: 'text', text: 'timeout' }], is_error: true }] },
];
const turn = { model, max_tokens: 6, temperature: 0, tools, tool_choice: { type: 'auto' }, messages: loop };
const next = await client.messages.create(turn);
const nextStreamed = await client.messages.stream(turn).finalMessage();
out.tool_loop = { stop_reason: next.stop_reason, blocks: next.content.map((b) => b.type),
                  text: next.content.filter((b) => b.type === 'text').map((b) => b.text).join(''),
                  streamed_text: nextStreamed.content.filter((b) => b.type === 'text').map((b) => b.text).join(''),
                  input_tokens: next.usage.input_tokens };

for (const [name, call] of [
  ['unknown_model', () => client.messages.create({ ...ask, model: 'nope' })],
  ['bad_temperature', () => client.messages.create({ ...ask, temperature: 7 })],
  ['no_max_tokens', () => client.messages.create({ model, messages: ask.messages })],
  ['bad_min_tokens', () => client.messages.create({ ...ask, max_tokens: 4, min_tokens: 5 })],
  ['image', () => client.messages.create({ ...ask, messages: [{ role: 'user', content: [
    { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'AAAA' } }] }] })],
  ['bad_key', () => new Anthropic({ baseURL, apiKey: 'wrong', maxRetries: 0 }).messages.create(ask)],
  // After a refused key, on the connection Node's fetch pool kept: the refused body must not be
  // read as this request.
  ['forced_tool', () => client.messages.create({ model, max_tokens: 6, tools, tool_choice: { type: 'any' },
                                                 messages: loop })],
]) {
  try {
    await call();
    out[name] = 'no error';
  } catch (e) {
    out[name] = { status: e.status, type: e.error?.error?.type, message: e.error?.error?.message ?? e.message };
  }
}
console.log(JSON.stringify(out));
