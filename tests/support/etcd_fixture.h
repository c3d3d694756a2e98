// EtcdFixture: a test with its own real etcd (EtcdServer) and a client of it, started before
// each test and stopped after it. A derived SetUp calls EtcdFixture::SetUp() first and returns
// if that failed (HasFatalFailure()).
#pragma once

#include <gtest/gtest.h>

#include <memory>

#include "etcd_server.h"
#include "kvfs/etcd.h"

namespace kvfs::testing {

class EtcdFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    Status st = server_.Start();
    ASSERT_TRUE(st.ok()) << st.ToString();
    auto c = server_.NewClient();
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    client_ = std::move(*c);
  }

  EtcdServer server_;
  std::unique_ptr<etcd::Client> client_;
};

}  // namespace kvfs::testing
