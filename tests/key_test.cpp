#include "progcache/key.h"

#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <set>

namespace progcache {
namespace {

ProgramKeyInputs base_inputs() {
  ProgramKeyInputs in;
  in.code = "extern \"C\" __global__ void k(float* x) { x[0] = 1; }";
  in.code_type = CodeType::cxx;
  in.target = TargetType::cubin;
  in.options = {"-arch=sm_90", "-std=c++17"};
  in.name = "k.cu";
  in.compiler = {"13.0", "fp1", "13.0", ""};
  return in;
}

Key key_of(const ProgramKeyInputs& in) {
  auto k = make_program_cache_key(in);
  EXPECT_TRUE(k.ok()) << k.status().to_string();
  return k.ok() ? *k : Key{};
}

TEST(Key, HexRoundTripAndValidation) {
  const Key k = KeyBuilder("t").add_string("a", "b").finish();
  EXPECT_EQ(k.hex().size(), 64u);
  EXPECT_EQ(*Key::from_hex(k.hex()), k);
  EXPECT_EQ(Key::from_hex("abc").status().code(), Code::invalid_argument);
  EXPECT_EQ(Key::from_hex(std::string(63, 'a') + "g").status().code(), Code::invalid_argument);
}

TEST(Key, UserKeysStringAndBytesAreOneKeyAndHexIsTakenLiterally) {
  const std::string s = "k";
  EXPECT_EQ(key_from_user(s), key_from_user(std::string_view("k", 1)));
  const Key k = key_from_user("some kernel");
  EXPECT_EQ(key_from_user(k.hex()), k);    // 64 hex digits: the key itself
  EXPECT_NE(key_from_string(k.hex()), k);  // forced hashing differs
  EXPECT_NE(key_from_user("a"), key_from_user("b"));
  EXPECT_EQ(key_from_user(k.view()), k);  // 32 bytes: the raw key, as Python's key functions return it
  EXPECT_NE(key_from_user(k.view().substr(0, 31)), k);
  EXPECT_NE(key_from_user(std::string(k.view()) + "x"), k);  // any other length is hashed
}

TEST(KeyBuilder, LengthFramingPreventsConcatenationCollisions) {
  const Key a = KeyBuilder("t").add_string("x", "ab").add_string("y", "c").finish();
  const Key b = KeyBuilder("t").add_string("x", "a").add_string("y", "bc").finish();
  EXPECT_NE(a, b);
  const Key c = KeyBuilder("t").add_string("xa", "b").finish();
  const Key d = KeyBuilder("t").add_string("x", "ab").finish();
  EXPECT_NE(c, d);
}

TEST(KeyBuilder, TypesAreDistinct) {
  std::set<Key> keys;
  keys.insert(KeyBuilder("t").add("v", KeyValue("1")).finish());
  keys.insert(KeyBuilder("t").add("v", KeyValue(1)).finish());
  keys.insert(KeyBuilder("t").add("v", KeyValue(1ULL)).finish());
  keys.insert(KeyBuilder("t").add("v", KeyValue(1.0)).finish());
  keys.insert(KeyBuilder("t").add("v", KeyValue(true)).finish());
  keys.insert(KeyBuilder("t").add("v", KeyValue::bytes("1")).finish());
  keys.insert(KeyBuilder("t").add("v", KeyValue(KeyValue::List{KeyValue("1")})).finish());
  keys.insert(KeyBuilder("t").add("v", KeyValue(KeyValue::None{})).finish());
  EXPECT_EQ(keys.size(), 8u);
}

TEST(KeyBuilder, FloatsAreHashedByExactBits) {
  const auto f = [](double d) { return KeyBuilder("t").add("f", KeyValue(d)).finish(); };
  EXPECT_NE(f(0.0), f(-0.0));
  EXPECT_NE(f(0.1), f(0.1 + 1e-17 + 1e-16));
  EXPECT_EQ(f(std::numeric_limits<double>::quiet_NaN()), f(std::numeric_limits<double>::quiet_NaN()));
}

TEST(KeyBuilder, MapsAreOrderIndependentListsAreNot) {
  KeyValue::Map m1{{"b", 2}, {"a", 1}};
  KeyValue::Map m2;
  m2.emplace("a", 1);
  m2.emplace("b", 2);
  EXPECT_EQ(KeyBuilder("t").add("m", m1).finish(), KeyBuilder("t").add("m", m2).finish());
  KeyValue::List l1{1, 2}, l2{2, 1};
  EXPECT_NE(KeyBuilder("t").add("l", l1).finish(), KeyBuilder("t").add("l", l2).finish());
}

TEST(KeyBuilder, DomainSeparatesFamilies) {
  EXPECT_NE(KeyBuilder("a").add_string("x", "1").finish(), KeyBuilder("b").add_string("x", "1").finish());
}

TEST(ProgramKey, EquivalentOptionSpellingsGiveOneKey) {
  auto in = base_inputs();
  const Key k = key_of(in);
  for (const std::vector<std::string>& opts :
       {std::vector<std::string>{"-arch", "sm_90", "-std=c++17"},
        std::vector<std::string>{"--gpu-architecture=sm_90", "--std=c++17"},
        std::vector<std::string>{"--gpu-architecture", "sm_90", "-std", "c++17"}}) {
    in.options = opts;
    EXPECT_EQ(key_of(in), k) << opts[0];
  }
  auto canon =
      canonicalize_options({"-DFOO=1", "-D", "BAR", "--define-macro=BAZ", "-use_fast_math", "-lineinfo"}, false);
  ASSERT_TRUE(canon.ok());
  EXPECT_EQ(*canon, (std::vector<std::string>{"--define-macro=FOO=1", "--define-macro=BAR", "--define-macro=BAZ",
                                              "--use_fast_math", "--generate-line-info"}));
}

TEST(ProgramKey, EveryInputChangesTheKey) {
  const Key k = key_of(base_inputs());
  std::vector<std::function<void(ProgramKeyInputs&)>> edits = {
      [](auto& in) { in.code = "extern \"C\" __global__ void k(float* x) { x[0] = 2; }"; },
      [](auto& in) { in.target = TargetType::ptx; },
      [](auto& in) {
        in.options = {"-arch=sm_80", "-std=c++17"};
      },
      [](auto& in) { in.options.push_back("--use_fast_math"); },
      [](auto& in) {
        in.options = {"-std=c++17", "-arch=sm_90"};
      },  // order is kept: -D/-U order matters
      [](auto& in) { in.name_expressions = {"k"}; },
      [](auto& in) {
        in.headers = {{"a.h", "int a;"}};
      },
      [](auto& in) { in.extra_digest = "abc"; },
      [](auto& in) { in.name = "other.cu"; },
      [](auto& in) { in.compiler.nvrtc_version = "12.9"; },
      [](auto& in) { in.compiler.nvrtc_fingerprint = "fp2"; },
      [](auto& in) { in.compiler.nvjitlink_version = "12.9"; },
      [](auto& in) { in.compiler.driver_version = "580"; },
  };
  std::set<Key> seen{k};
  for (std::size_t i = 0; i < edits.size(); ++i) {
    auto in = base_inputs();
    edits[i](in);
    EXPECT_TRUE(seen.insert(key_of(in)).second) << "edit " << i << " did not change the key";
  }
}

TEST(ProgramKey, NameExpressionsAndHeadersAreSortedAndDeduplicated) {
  auto a = base_inputs();
  a.name_expressions = {"f<int>", "g", "f<int>"};
  a.headers = {{"b.h", "B"}, {"a.h", "A"}};
  auto b = base_inputs();
  b.name_expressions = {"g", "f<int>"};
  b.headers = {{"a.h", "A"}, {"b.h", "B"}};
  EXPECT_EQ(key_of(a), key_of(b));
  b.headers = {{"a.h", "A"}, {"a.h", "other"}};
  EXPECT_EQ(make_program_cache_key(b).status().code(), Code::invalid_argument);
}

TEST(ProgramKey, OptionsTakingTheNextWordFollowTheOneTable) {
  for (const char* w : {"-I", "--include-path", "-arch", "--gpu-architecture", "-Xptxas", "--ptxas-options", "-D",
                        "-std", "--std", "-include", "-maxrregcount", "-split", "-dopt"}) {
    EXPECT_TRUE(option_takes_next_word(w)) << w;
  }
  for (const char* w : {"-Iinc", "--std=c++17", "-arch=sm_90", "-DX=1", "-G", "-lineinfo", "--use_fast_math", "k.cu",
                        "-", "--", "-unknown-option"}) {
    EXPECT_FALSE(option_takes_next_word(w)) << w;
  }
}

TEST(ProgramKey, FileReadingOptionsNeedAnExtraDigest) {
  for (const std::vector<std::string>& opts :
       {std::vector<std::string>{"-I/usr/include/foo"}, std::vector<std::string>{"-I", "inc"},
        std::vector<std::string>{"--include-path=inc"}, std::vector<std::string>{"-include", "pre.h"},
        std::vector<std::string>{"--use-pch=x.pch"}}) {
    auto in = base_inputs();
    in.options = opts;
    auto k = make_program_cache_key(in);
    ASSERT_FALSE(k.ok()) << opts[0];
    EXPECT_EQ(k.status().code(), Code::invalid_argument);
    EXPECT_NE(k.status().message().find("extra_digest"), std::string::npos) << k.status().message();
    in.extra_digest = "fingerprint-of-include-dir";
    EXPECT_TRUE(make_program_cache_key(in).ok()) << opts[0];
  }
}

TEST(ProgramKey, SideEffectOptionsAreAlwaysRefused) {
  for (const std::vector<std::string>& opts :
       {std::vector<std::string>{"--create-pch=x.pch"}, std::vector<std::string>{"-pch"},
        std::vector<std::string>{"--time=t.csv"}, std::vector<std::string>{"-fdevice-time-trace=t.json"},
        std::vector<std::string>{"--pch-dir=d"}}) {
    auto in = base_inputs();
    in.options = opts;
    in.extra_digest = "d";
    auto k = make_program_cache_key(in);
    ASSERT_FALSE(k.ok()) << opts[0];
    EXPECT_NE(k.status().message().find("side effects"), std::string::npos) << k.status().message();
  }
}

TEST(ProgramKey, CodeTargetPairsFollowCudaCoresTable) {
  auto in = base_inputs();
  const auto ok = [&](CodeType c, TargetType t) {
    in.code_type = c;
    in.target = t;
    return make_program_cache_key(in).ok();
  };
  EXPECT_TRUE(ok(CodeType::ptx, TargetType::cubin));
  EXPECT_TRUE(ok(CodeType::ptx, TargetType::ptx));
  EXPECT_FALSE(ok(CodeType::ptx, TargetType::ltoir));
  EXPECT_EQ(make_program_cache_key(in).status().code(), Code::invalid_argument);
  EXPECT_TRUE(ok(CodeType::ltoir, TargetType::cubin));
  EXPECT_FALSE(ok(CodeType::ltoir, TargetType::ltoir));
  EXPECT_TRUE(ok(CodeType::nvvm, TargetType::ptx));
  EXPECT_TRUE(ok(CodeType::nvvm, TargetType::ltoir));
  EXPECT_FALSE(ok(CodeType::nvvm, TargetType::cubin));
}

TEST(ProgramKey, CodeTypesAndTargetsParseInAnyCase) {
  EXPECT_EQ(*parse_code_type("PTX"), CodeType::ptx);
  EXPECT_EQ(*parse_code_type("C++"), CodeType::cxx);
  EXPECT_EQ(*parse_code_type("NVVM"), CodeType::nvvm);
  EXPECT_EQ(*parse_target_type("CUBIN"), TargetType::cubin);
  EXPECT_FALSE(parse_code_type("fortran").ok());
}

TEST(ProgramKey, NvvmInputsAreKeyedAndLibdeviceNeedsADigest) {
  auto in = base_inputs();
  in.code_type = CodeType::nvvm;
  in.target = TargetType::ptx;
  const Key plain = *make_program_cache_key(in);
  in.use_libdevice = true;
  EXPECT_EQ(make_program_cache_key(in).status().code(), Code::invalid_argument);
  in.extra_digest = "libdevice digest";
  const Key with_lib = *make_program_cache_key(in);
  in.use_libdevice = false;
  EXPECT_NE(*make_program_cache_key(in), with_lib);
  in.extra_digest.reset();
  in.nvvm_extra_sources = {{"a", "1"}, {"b", "2"}};
  const Key ab = *make_program_cache_key(in);
  in.nvvm_extra_sources = {{"b", "2"}, {"a", "1"}};
  const Key ba = *make_program_cache_key(in);
  EXPECT_NE(ab, ba);  // module order can change which definition wins
  EXPECT_NE(ab, plain);
  in.nvvm_extra_sources.clear();
  in.compiler.nvvm_fingerprint = "another libNVVM";
  EXPECT_NE(*make_program_cache_key(in), plain);
  // Other code types have no NVVM inputs.
  in.code_type = CodeType::cxx;
  in.target = TargetType::cubin;
  in.use_libdevice = true;
  in.extra_digest = "d";
  EXPECT_EQ(make_program_cache_key(in).status().code(), Code::invalid_argument);
}

TEST(ProgramKey, MissingOptionValueAndEmptyDigestAreErrors) {
  auto in = base_inputs();
  in.options = {"-arch"};
  EXPECT_NE(make_program_cache_key(in).status().message().find("needs a value"), std::string::npos);
  in = base_inputs();
  in.extra_digest = "";
  EXPECT_EQ(make_program_cache_key(in).status().code(), Code::invalid_argument);
}

TEST(ProgramKey, NulBytesAreRefusedInOptionsAndTheirValues) {
  // Found by the program_key fuzzer: a NUL in a separate value word made
  // canonicalisation accept what it would refuse once canonical.
  EXPECT_EQ(canonicalize_options({std::string("-DA\0B", 5)}, false).status().code(), Code::invalid_argument);
  EXPECT_EQ(canonicalize_options({"-arch", std::string("sm_\0", 4)}, false).status().code(), Code::invalid_argument);
}

TEST(ProgramKey, CodeAndTargetNamesParse) {
  EXPECT_EQ(*parse_code_type("c++"), CodeType::cxx);
  EXPECT_EQ(*parse_code_type("ptx"), CodeType::ptx);
  EXPECT_EQ(*parse_target_type("cubin"), TargetType::cubin);
  EXPECT_FALSE(parse_code_type("fortran").ok());
  EXPECT_FALSE(parse_target_type("exe").ok());
}

TEST(KernelKey, KeywordOrderDoesNotMatterButValuesAndTypesDo) {
  KernelKey a{"mod.gemm", {}, {{{128, 64}, "float16"}}, "sm_90a"};
  a.template_kwargs.emplace("BLOCK_M", 128);
  a.template_kwargs.emplace("BLOCK_N", 64);
  KernelKey b{"mod.gemm", {}, {{{128, 64}, "float16"}}, "sm_90a"};
  b.template_kwargs.emplace("BLOCK_N", 64);
  b.template_kwargs.emplace("BLOCK_M", 128);
  EXPECT_EQ(a.hash(), b.hash());
  EXPECT_EQ(a.hash().size(), 32u);  // pyptx's form: 32 hex digits
  EXPECT_EQ(a.hash(), a.key().hex().substr(0, 32));
  b.template_kwargs["BLOCK_N"] = std::string("64");
  EXPECT_NE(a.hash(), b.hash());
  KernelKey c = a;
  c.arch = "sm_80";
  EXPECT_NE(a.hash(), c.hash());
  KernelKey d = a;
  d.input_shapes[0].shape = {64, 128};
  EXPECT_NE(a.hash(), d.hash());
}

}  // namespace
}  // namespace progcache
