// gpipe-plan: one binary, subcommands from cli/commands.cpp's table.
#include <iostream>

#include "cli/commands.h"

int main(int argc, char** argv) { return gpipe::cli::RunCli(argc, argv, std::cout, std::cerr); }
