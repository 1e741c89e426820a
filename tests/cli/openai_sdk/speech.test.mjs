// voxd serve as the official OpenAI Node SDK sees it: client.audio.speech.create for every
// response_format (each decoded with ffmpeg and checked against the same sentence in WAV), a voice
// alias, the {id} voice form, instructions, stream_format "sse", voxd's sample_rate extension,
// an error as the SDK reports it, and client.models.retrieve.
//
// Starts nothing itself: tests/cli/run_openai_sdk.py starts the server and runs
// `node --test` with VOXD_BASE_URL (http://127.0.0.1:PORT/v1), VOXD_API_KEY, VOXD_VOICE (a
// served voice) and VOXD_ALIAS (an alias of it) set.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { before, test } from "node:test";
import OpenAI from "openai";

const env = (name) => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set (tests/cli/run_openai_sdk.py sets it)`);
  return value;
};
const client = new OpenAI({
  baseURL: env("VOXD_BASE_URL"),
  apiKey: env("VOXD_API_KEY"),
  maxRetries: 0,
  timeout: 120_000,
});
const VOICE = env("VOXD_VOICE");
const ALIAS = env("VOXD_ALIAS");
const SENTENCE = "The quick brown fox jumps over the lazy dog.";
// OpenAI's pcm: 16-bit mono at 24 kHz, with nothing in the bytes to say so.
const PCM_RATE = 24000;
// Decoded lossy audio may be longer by its codec's priming and padding (MP3 up to 2 frames of
// 1152, AAC 2 frames of 1024, at 22.05 kHz under 0.11 s); a resampler adds no length.
const LOSSY_SLACK_S = 0.15;

const CONTENT_TYPES = {
  mp3: "audio/mpeg",
  opus: "audio/ogg",
  aac: "audio/aac",
  flac: "audio/flac",
  wav: "audio/wav",
  pcm: "audio/pcm",
};

// Whether `bytes` start the way a file in `format` does.
function hasMagic(format, bytes) {
  const ascii = (at, text) => bytes.subarray(at, at + text.length).toString("latin1") === text;
  switch (format) {
    case "mp3": // an ID3 tag or an MPEG audio frame's sync word
      return ascii(0, "ID3") || (bytes[0] === 0xff && (bytes[1] & 0xe0) === 0xe0);
    case "opus":
      return ascii(0, "OggS") && bytes.includes(Buffer.from("OpusHead"));
    case "aac": // ADTS: sync word, MPEG-4, layer 0, AAC-LC
      return bytes[0] === 0xff && (bytes[1] & 0xf6) === 0xf0 && bytes[2] >> 6 === 1;
    case "flac":
      return ascii(0, "fLaC");
    case "wav":
      return ascii(0, "RIFF") && ascii(8, "WAVE");
    default:
      return true; // pcm has no header
  }
}

// Seconds of audio ffmpeg decodes from `bytes` (pcm read as 16-bit mono at `pcmRate`).
function decodedSeconds(format, bytes, pcmRate = PCM_RATE) {
  const input = format === "pcm" ? ["-f", "s16le", "-ar", String(pcmRate), "-ac", "1"] : [];
  const rate = 48000;
  const result = spawnSync(
    "ffmpeg",
    ["-hide_banner", "-loglevel", "error", ...input, "-i", "pipe:0",
     "-f", "s16le", "-ac", "1", "-ar", String(rate), "pipe:1"],
    { input: bytes, maxBuffer: 1 << 30 },
  );
  if (result.error) throw result.error;
  assert.equal(result.status, 0, `ffmpeg could not decode the ${format}: ${result.stderr}`);
  const samples = new Int16Array(result.stdout.buffer, result.stdout.byteOffset,
                                 result.stdout.length / 2);
  assert.ok(samples.some((s) => Math.abs(s) > 1000), `the decoded ${format} is silent`);
  return samples.length / rate;
}

// The rate and sample count of a WAV from voxd (44-byte header; streamed: sizes 0xFFFFFFFF).
function wavLayout(bytes) {
  assert.ok(hasMagic("wav", bytes), "not a WAV file");
  assert.equal(bytes.readUInt16LE(22), 1, "WAV channels");
  assert.equal(bytes.readUInt16LE(34), 16, "WAV bits per sample");
  return { rate: bytes.readUInt32LE(24), samples: (bytes.length - 44) / 2 };
}

async function speech(params) {
  const response = await client.audio.speech.create({
    model: "tts-1",
    voice: VOICE,
    input: SENTENCE,
    ...params,
  });
  return { response, bytes: Buffer.from(await response.arrayBuffer()) };
}

// The sentence in WAV at the voice's rate: what every other answer is compared with.
let reference;
before(async () => {
  const { bytes } = await speech({ response_format: "wav" });
  reference = wavLayout(bytes);
  reference.seconds = reference.samples / reference.rate;
  assert.ok(reference.seconds > 1, `the reference is ${reference.seconds} s long`);
});

for (const format of Object.keys(CONTENT_TYPES)) {
  test(`response_format ${format} decodes to the sentence`, async () => {
    const { response, bytes } = await speech({ response_format: format });
    assert.equal(response.headers.get("content-type"), CONTENT_TYPES[format]);
    assert.ok(hasMagic(format, bytes), `${format} does not start as ${format} does`);
    const seconds = decodedSeconds(format, bytes);
    if (format === "pcm") {
      assert.equal(response.headers.get("x-sample-rate"), String(PCM_RATE));
      // Resampled from the voice's rate: ceil(samples * 24000 / rate) samples of 2 bytes.
      const samples = Math.ceil((reference.samples * PCM_RATE) / reference.rate);
      assert.equal(bytes.length, 2 * samples, "pcm's length at 24 kHz");
    }
    const lossy = ["mp3", "opus", "aac"].includes(format);
    assert.ok(seconds >= reference.seconds - 0.01, `${format}: ${seconds} s < ${reference.seconds} s`);
    assert.ok(seconds <= reference.seconds + (lossy ? LOSSY_SLACK_S : 0.01),
              `${format}: ${seconds} s > ${reference.seconds} s`);
  });
}

test("sample_rate \"native\" (voxd's extension) gives pcm at the voice's rate", async () => {
  const { response, bytes } = await speech({ response_format: "pcm", sample_rate: "native" });
  assert.equal(response.headers.get("x-sample-rate"), String(reference.rate));
  assert.equal(bytes.length, 2 * reference.samples);
});

test("an alias speaks with its voice", async () => {
  const { bytes } = await speech({ voice: ALIAS, response_format: "wav" });
  assert.deepEqual(wavLayout(bytes), { rate: reference.rate, samples: reference.samples });
});

test("the voice may be given as {id}", async () => {
  const { bytes } = await speech({ voice: { id: VOICE }, response_format: "wav" });
  assert.deepEqual(wavLayout(bytes), { rate: reference.rate, samples: reference.samples });
});

test("instructions are accepted, and the answer says they were ignored", async () => {
  const { response, bytes } = await speech({
    response_format: "wav",
    instructions: "Speak in a cheerful and positive tone.",
  });
  assert.equal(response.headers.get("x-ignored-fields"), "instructions");
  assert.equal(wavLayout(bytes).samples, reference.samples);
});

test("stream_format sse sends the audio in speech.audio.delta events", async () => {
  const { response, bytes } = await speech({ response_format: "pcm", stream_format: "sse" });
  assert.match(response.headers.get("content-type"), /^text\/event-stream/);
  const events = bytes
    .toString("utf8")
    .split("\n\n")
    .filter((block) => block.trim() !== "")
    .map((block) => {
      const data = block.split("\n").filter((line) => line.startsWith("data: "));
      assert.equal(data.length, 1, `an event with one data line: ${block.slice(0, 200)}`);
      return JSON.parse(data[0].slice("data: ".length));
    });
  assert.ok(events.length >= 2, `${events.length} events`);
  const done = events.at(-1);
  assert.equal(done.type, "speech.audio.done");
  const deltas = events.slice(0, -1);
  for (const event of deltas) assert.equal(event.type, "speech.audio.delta");
  const { input_tokens: input, output_tokens: output, total_tokens: total } = done.usage;
  assert.ok(Number.isInteger(input) && input > 0, `input_tokens ${input}`);
  assert.ok(Number.isInteger(output) && output > 0, `output_tokens ${output}`);
  assert.equal(total, input + output);
  const audio = Buffer.concat(deltas.map((event) => Buffer.from(event.audio, "base64")));
  assert.equal(audio.length, 2 * Math.ceil((reference.samples * PCM_RATE) / reference.rate));
  const seconds = decodedSeconds("pcm", audio);
  assert.ok(Math.abs(seconds - reference.seconds) < 0.01, `${seconds} s`);
});

test("a bad voice is a BadRequestError naming the field", async () => {
  await assert.rejects(speech({ voice: "no-such-voice" }), (error) => {
    assert.ok(error instanceof OpenAI.BadRequestError, String(error));
    assert.equal(error.status, 400);
    assert.equal(error.param, "voice");
    assert.match(error.message, /no-such-voice/);
    return true;
  });
});

test("models.retrieve('tts-1')", async () => {
  const model = await client.models.retrieve("tts-1");
  assert.equal(model.id, "tts-1");
  assert.equal(model.object, "model");
});
