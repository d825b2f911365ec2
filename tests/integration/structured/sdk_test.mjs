// The official `openai` client's structured-output helpers against a colibri server:
// chat.completions.parse with a zod schema, and responses.create with text.format json_schema
// (whole and streamed). usage: node sdk_test.mjs BASE_URL MODEL   (prints one JSON line)
import OpenAI from 'openai';
import { z } from 'zod';
import { zodResponseFormat } from 'openai/helpers/zod';

const [baseURL, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: 'x', maxRetries: 0, timeout: 120000 });
const out = {};

const Event = z.object({
  name: z.string().max(10),
  day: z.enum(['mon', 'tue', 'wed']),
  guests: z.array(z.string().max(6)).max(3),
  confirmed: z.boolean(),
  room: z.number().int().nullable(),
});
const parsed = await client.chat.completions.parse({
  model, temperature: 1, max_tokens: 120,
  messages: [{ role: 'user', content: 'Plan an event.' }],
  response_format: zodResponseFormat(Event, 'event'),
});
const message = parsed.choices[0].message;
out.parse = { parsed: message.parsed, finish: parsed.choices[0].finish_reason,
              valid: Event.safeParse(message.parsed).success };

const format = { type: 'json_schema', name: 'city', strict: true,
                 schema: { type: 'object', additionalProperties: false, required: ['city', 'temp'],
                           properties: { city: { type: 'string', maxLength: 12 }, temp: { type: 'integer' } } } };
const whole = await client.responses.create({ model, input: 'Weather?', temperature: 1, max_output_tokens: 60,
                                              text: { format } });
out.responses = { status: whole.status, text: whole.output_text };
const stream = client.responses.stream({ model, input: 'Weather?', temperature: 1, max_output_tokens: 60,
                                         text: { format } });
let streamed = '';
stream.on('response.output_text.delta', (e) => { streamed += e.delta; });
const final = await stream.finalResponse();
out.streamed = { text: streamed, final: final.output_text };
try {
  await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'x' }],
    response_format: { type: 'json_schema', json_schema: { name: 'z', schema: { type: 'string', pattern: '^a' } } } });
  out.refused = { status: 200 };
} catch (e) {
  out.refused = { status: e.status, message: e.error?.message ?? e.message };
}
console.log(JSON.stringify(out));
