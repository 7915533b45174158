// Test oracle only: runs @cloud-copilot/iam-simulate's runSimulation on each simulation of a JSON array read from
// stdin and prints one JSON array of {decision, errors, ignoredContextKeys} in the same order.
// decision: "Allowed" | "ExplicitlyDenied" | "ImplicitlyDenied" (the library's overallResult), or null when the
// library refused the simulation (errors then holds its message and details). Never shipped; see README.md.
import { runSimulation } from '@cloud-copilot/iam-simulate'

const chunks = []
for await (const chunk of process.stdin) chunks.push(chunk)
const simulations = JSON.parse(Buffer.concat(chunks).toString('utf8'))
if (!Array.isArray(simulations)) {
  process.stderr.write('simulate.mjs: stdin must be a JSON array of simulations\n')
  process.exit(2)
}
const out = []
for (const simulation of simulations) {
  try {
    const response = await runSimulation(simulation, { simulationMode: 'Strict' })
    if (response.resultType === 'error') {
      out.push({ decision: null, errors: response.errors, ignoredContextKeys: [] })
    } else {
      const ignored = response.resultType === 'single' ? (response.result.ignoredContextKeys ?? []) : []
      out.push({ decision: response.overallResult, errors: null, ignoredContextKeys: ignored })
    }
  } catch (err) {
    out.push({ decision: null, errors: { message: String(err && err.stack ? err.stack : err) }, ignoredContextKeys: [] })
  }
}
process.stdout.write(JSON.stringify(out))
