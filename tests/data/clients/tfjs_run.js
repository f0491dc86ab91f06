// Runs a TF.js graph model (tensorflowjs_converter's output) on raw uint8 images, as a web page would.
// node tfjs_run.js MODEL_DIR IMAGES N H W  (IMAGES: N*H*W*3 bytes) -> JSON {backend, outputs: {name: {shape, data}}}
// Needs @tensorflow/tfjs (pure JavaScript, CPU backend) on NODE_PATH; tfjs-node would download a binary.
const tf = require('@tensorflow/tfjs');
const fs = require('fs');
const path = require('path');

async function main() {
  const [dir, imagesFile, n, h, w] = process.argv.slice(2);
  const model = JSON.parse(fs.readFileSync(path.join(dir, 'model.json')));
  const specs = [], buffers = [];
  for (const group of model.weightsManifest) {
    specs.push(...group.weights);
    for (const p of group.paths) buffers.push(fs.readFileSync(path.join(dir, p)));
  }
  const all = Buffer.concat(buffers);
  const weightData = all.buffer.slice(all.byteOffset, all.byteOffset + all.byteLength);
  // fromMemory: loading from files (file://) needs tfjs-node
  const graph = await tf.loadGraphModel(tf.io.fromMemory({modelTopology: model.modelTopology, weightSpecs: specs,
    weightData, signature: model.signature, format: model.format}));
  // TF.js has no uint8 tensors: the uint8 input is fed as int32
  const x = tf.tensor4d(new Int32Array(fs.readFileSync(imagesFile)), [+n, +h, +w, 3], 'int32');
  const names = graph.outputs.map(o => o.name);
  const outputs = await graph.executeAsync({images: x}, names);
  const result = {backend: tf.getBackend(), outputs: {}};
  (Array.isArray(outputs) ? outputs : [outputs]).forEach((t, i) => {
    result.outputs[names[i]] = {shape: t.shape, data: Array.from(t.dataSync())};
  });
  console.log(JSON.stringify(result));
}

main().catch(e => { console.error(e); process.exit(1); });
