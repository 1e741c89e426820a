// onnxruntime's CPU time for a vocoder beside voxd_bench's: the same voice's HiFi-GAN exported by
// export_vocoder.py, a [1, 80, 720] mel (what voxd_bench's 120 phonemes × 6 frames give), the
// median of `repeats` runs after one warm-up, printed as voxd_bench's vocoder columns.
//
//   cd bench/onnxruntime_peer && npm install --ignore-scripts   # CPU binaries ship in the package;
//                                                               # its install script fetches GPU ones
//   node vocoder.js /tmp/lj-v1.onnx --threads 2 --repeats 3 [--hop 256 --rate 22050]
const ort = require('onnxruntime-node');

function option(name, fallback) {
  const i = process.argv.indexOf(name);
  return i > 0 ? Number(process.argv[i + 1]) : fallback;
}

async function main() {
  const model = process.argv[2];
  if (!model || model.startsWith('--')) {
    console.error('usage: node vocoder.js MODEL.onnx [--threads N] [--repeats N] [--hop N] [--rate N]');
    process.exit(2);
  }
  const threads = option('--threads', 2);
  const repeats = option('--repeats', 3);
  const hop = option('--hop', 256);
  const rate = option('--rate', 22050);
  const session = await ort.InferenceSession.create(model, {
    intraOpNumThreads: threads, interOpNumThreads: 1, executionMode: 'sequential',
    graphOptimizationLevel: 'all'});
  const mels = 80, frames = 720;
  const data = new Float32Array(mels * frames);
  let state = 1234;  // a fixed pseudo-random mel in [-1, 1)
  for (let i = 0; i < data.length; i++) {
    state = (state * 1103515245 + 12345) % 2147483648;
    data[i] = state / 1073741824 - 1;
  }
  const feeds = {mel: new ort.Tensor('float32', data, [1, mels, frames])};
  const times = [];
  for (let r = 0; r <= repeats; r++) {
    const start = process.hrtime.bigint();
    const out = await session.run(feeds);
    const seconds = Number(process.hrtime.bigint() - start) / 1e9;
    if (out.audio.dims[2] !== frames * hop) throw new Error(`audio ${out.audio.dims}, expected ${frames * hop} samples`);
    if (r > 0) times.push(seconds);
  }
  times.sort((a, b) => a - b);
  const median = times[Math.floor(times.length / 2)];
  const audio = frames * hop / rate;
  console.log(`| ${model} (onnxruntime ${ort.env.versions.common}, ${threads} threads) | ${frames} | ` +
              `${audio.toFixed(2)} | ${median.toFixed(3)} | ${(median / audio).toFixed(4)} |`);
}

main().catch((e) => { console.error(e); process.exit(1); });
