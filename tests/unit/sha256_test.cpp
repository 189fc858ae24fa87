// SHA-256 against the FIPS 180-4 / NIST test vectors.
#include "stagehand/util/sha256.hpp"

#include <gtest/gtest.h>

using namespace stagehand;

TEST(Sha256, NistVectors)
{
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  Sha256 million;
  const std::string chunk(1000, 'a');
  for (int i = 0; i < 1000; ++i) {
    million.update(chunk);
  }
  EXPECT_EQ(million.hex_digest(), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, FieldsAreLengthPrefixed)
{
  Sha256 a;
  a.field("ab");
  a.field("c");
  Sha256 b;
  b.field("a");
  b.field("bc");
  EXPECT_NE(a.hex_digest(), b.hex_digest());
}
