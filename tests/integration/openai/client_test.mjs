// Drives a colibri server with the official `openai` npm client, as a real application would.
// usage: node client_test.mjs BASE_URL API_KEY   (prints one JSON line of results)
import OpenAI from 'openai';

const [baseURL, apiKey] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 120000 });
const out = {};

const models = await client.models.list();
out.models = models.data.map((m) => m.id);
const model = out.models[0];

const chat = await client.chat.completions.create({
  model, temperature: 0, max_tokens: 8, seed: 1,
  messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Tell me about the sea.' }],
});
out.chat = { text: chat.choices[0].message.content, finish: chat.choices[0].finish_reason, usage: chat.usage };

const stream = await client.chat.completions.create({
  model, temperature: 0, max_tokens: 8, seed: 1, stream: true, stream_options: { include_usage: true },
  messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Tell me about the sea.' }],
});
let text = '', chunks = 0, finish = null, usage = null;
for await (const chunk of stream) {
  chunks++;
  if (chunk.usage) usage = chunk.usage;
  for (const c of chunk.choices) {
    text += c.delta?.content ?? '';
    finish = c.finish_reason ?? finish;
  }
}
out.stream = { text, chunks, finish, usage };

const logprobs = await client.chat.completions.create({
  model, temperature: 0, max_tokens: 3, logprobs: true, top_logprobs: 2,
  messages: [{ role: 'user', content: 'Hi' }],
});
out.logprobs = logprobs.choices[0].logprobs.content.map((t) => ({ lp: t.logprob, top: t.top_logprobs.length }));

const completion = await client.completions.create({ model, prompt: 'The sea', max_tokens: 5, temperature: 0 });
out.completion = { text: completion.choices[0].text, usage: completion.usage };

for (const [name, call] of [
  ['unknown_model', () => client.chat.completions.create({ model: 'nope', messages: [{ role: 'user', content: 'x' }] })],
  ['bad_temperature', () => client.chat.completions.create({ model, temperature: 7, messages: [{ role: 'user', content: 'x' }] })],
  ['bad_key', () => new OpenAI({ baseURL, apiKey: 'wrong', maxRetries: 0 }).models.list()],
]) {
  try {
    await call();
    out[name] = 'no error';
  } catch (e) {
    out[name] = { status: e.status, type: e.error?.type ?? e.type, message: e.error?.message ?? e.message };
  }
}
console.log(JSON.stringify(out));
