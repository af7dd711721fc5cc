// A scripted language model for the agent-framework clients: step N calls
// tool calls[N][0] with input calls[N][1] (one call per step, since calls of
// one step run concurrently), then it answers "done". `seen.tools` holds the
// tools the framework passed to the model on the first step.
import { MockLanguageModelV4 } from "ai/test";

export function scriptedModel(calls, settings = {}) {
  const usage = {
    inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 },
    outputTokens: { total: 1, text: 1, reasoning: 0 },
  };
  const seen = { tools: [] };
  const model = new MockLanguageModelV4({
    ...settings,
    doGenerate: async (options) => {
      const step = model.doGenerateCalls.length - 1;
      if (step === 0) seen.tools = options.tools ?? [];
      if (step < calls.length) {
        const [toolName, input] = calls[step];
        return {
          content: [
            { type: "tool-call", toolCallId: `call-${step}`, toolName, input: JSON.stringify(input) },
          ],
          finishReason: { unified: "tool-calls", raw: "tool_calls" },
          usage,
          warnings: [],
        };
      }
      return {
        content: [{ type: "text", text: "done" }],
        finishReason: { unified: "stop", raw: "stop" },
        usage,
        warnings: [],
      };
    },
  });
  return { model, seen };
}
