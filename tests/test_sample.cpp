// `sample` as a user runs it: gpt2_tiny trained on a repeating text continues it greedily; the
// same seed gives the same text, under a budget too (forward recomputation is bit-identical);
// several samples come as one batch; token-id models print ids; wrong models and prompts are
// clear errors.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/source_dir.h"
#include "tests/tool_runner.h"

namespace remat {
namespace {

class Sample : public ToolRunTest {
 protected:
  // gpt2_tiny trained `steps` steps on "hello world. " repeated, saved to ck.safetensors.
  std::string trained_on_text(int steps) {
    std::ofstream(path("hw.txt")) << [] {
      std::string s;
      for (int i = 0; i < 400; ++i) s += "hello world. ";
      return s;
    }();
    std::string text = read_whole_file(test_source_dir() + "/configs/gpt2_tiny.yaml");
    const std::string synthetic = "data: {source: synthetic, seed: 7}";
    const size_t at = text.find(synthetic);
    EXPECT_NE(at, std::string::npos) << "configs/gpt2_tiny.yaml changed: update this test";
    text.replace(at, synthetic.size(), "data: {source: text, path: hw.txt}");
    std::ofstream(path("hw.yaml")) << text;
    RunResult r = run(TRAIN_EXE, "--config '" + path("hw.yaml") + "' --steps " +
                                     std::to_string(steps) + " --save '" + path("ck.safetensors") + "'");
    EXPECT_EQ(r.code, 0) << r.err;
    return "--config '" + path("hw.yaml") + "' --checkpoint '" + path("ck.safetensors") + "' ";
  }
};

TEST_F(Sample, ContinuesTheTextItWasTrainedOn) {
  const std::string model = trained_on_text(100);
  RunResult greedy = run(SAMPLE_EXE, model + "--prompt 'hello w' --tokens 12 --temperature 0");
  ASSERT_EQ(greedy.code, 0) << greedy.err;
  EXPECT_EQ(greedy.out.rfind("hello world. hel", 0), 0u) << greedy.out;
  EXPECT_EQ(greedy.out.size(), 7u + 12u + 1u) << "prompt, 12 bytes and a newline: " << greedy.out;
  EXPECT_NE(greedy.err.find("gpt2_tiny after step 100"), std::string::npos) << greedy.err;

  const std::string draw = model + "--prompt 'hello' --tokens 40 --temperature 1.5 --top-k 20 ";
  RunResult a = run(SAMPLE_EXE, draw + "--seed 7");
  RunResult b = run(SAMPLE_EXE, draw + "--seed 7");
  RunResult c = run(SAMPLE_EXE, draw + "--seed 8");
  ASSERT_EQ(a.code, 0) << a.err;
  EXPECT_EQ(a.out, b.out) << "the same seed draws the same text";
  EXPECT_NE(a.out, c.out) << "another seed draws other text (40 draws at temperature 1.5)";
  // Under a budget below keep-everything the solver recomputes; the draws do not change.
  RunResult tight = run(SAMPLE_EXE, draw + "--seed 7 --budget 640KB --time-limit 10");
  ASSERT_EQ(tight.code, 0) << tight.err;
  EXPECT_EQ(tight.out, a.out);
  EXPECT_NE(tight.err.find("plan checkmate"), std::string::npos) << tight.err;

  RunResult three = run(SAMPLE_EXE, model + "--prompt 'hello' --tokens 5 --samples 3");
  ASSERT_EQ(three.code, 0) << three.err;
  int separators = 0;
  for (size_t at = three.out.find("---------------\n"); at != std::string::npos;
       at = three.out.find("---------------\n", at + 1))
    ++separators;
  EXPECT_EQ(separators, 2) << three.out;
}

TEST_F(Sample, TokenModelsPrintIdsAndBadInputsAreClear) {
  const std::string tiny = test_source_dir() + "/configs/gpt2_tiny.yaml";
  ASSERT_EQ(run(TRAIN_EXE, "--config '" + tiny + "' --steps 2 --save '" + path("t.st") + "'").code, 0);
  const std::string model = "--config '" + tiny + "' --checkpoint '" + path("t.st") + "' ";
  RunResult ids = run(SAMPLE_EXE, model + "--prompt-tokens 1,2,3 --tokens 9");
  ASSERT_EQ(ids.code, 0) << ids.err;
  std::istringstream in(ids.out);
  std::vector<int> got;
  for (int t; in >> t;) got.push_back(t);
  ASSERT_EQ(got.size(), 12u) << ids.out;
  EXPECT_EQ(got[0], 1);
  EXPECT_EQ(got[2], 3);
  for (int t : got) EXPECT_TRUE(t >= 0 && t < 256) << t;

  RunResult text_prompt = run(SAMPLE_EXE, model + "--prompt hi");
  EXPECT_EQ(text_prompt.code, 2);
  EXPECT_NE(text_prompt.err.find("use --prompt-tokens"), std::string::npos) << text_prompt.err;
  RunResult big_id = run(SAMPLE_EXE, model + "--prompt-tokens 256");
  EXPECT_EQ(big_id.code, 2);
  EXPECT_NE(big_id.err.find("'256' is not a token id in [0, 256)"), std::string::npos) << big_id.err;
  RunResult image = run(SAMPLE_EXE, "--config '" + test_source_dir() +
                                        "/configs/small_cnn.yaml' --checkpoint '" + path("t.st") + "'");
  EXPECT_EQ(image.code, 1);
  EXPECT_NE(image.err.find("not a token model"), std::string::npos) << image.err;
}

}  // namespace
}  // namespace remat
