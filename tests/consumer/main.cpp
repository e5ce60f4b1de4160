#include <progcache/file_store.h>
#include <progcache/version.h>

#include <cstdio>

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  auto store = progcache::FileStore::open({.root = argv[1]});
  if (!store.ok()) return 1;
  const auto key = progcache::key_from_user("consumer");
  if (!(*store)->put_bytes(key, progcache::Bytes::copy_of("hello")).ok()) return 1;
  auto got = (*store)->get_bytes(key);
  if (!got.ok() || !got->has_value() || (*got)->view() != "hello") return 1;
  std::printf("progcache %s ok\n", PROGCACHE_VERSION_STRING);
  return 0;
}
